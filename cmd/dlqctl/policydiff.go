package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/jsdlq/jsdlq/shared/triage"
)

// policyDiffOut is what `policy diff` prints: an override against the
// default (triage.Overlaid) and the effective policy it makes.
type policyDiffOut struct {
	Source           string `json:"source"` // the stored override, a file, or "embedded default"
	DefaultVersion   string `json:"default_version"`
	EffectiveVersion string `json:"effective_version"`
	triage.Overlaid
	EffectiveYAML string `json:"effective_yaml"`
}

// policyDiff shows the stored override (or FILE, as it would be applied)
// against the default: each effective rule in the order rules are tried
// and where it comes from, the default rules it deletes, the settings it
// changes, then the effective policy.
func (a *app) policyDiff(ctx context.Context, args []string) error {
	fs := newFlags("policy diff")
	asJSON := fs.Bool("json", false, "JSON output")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("policy diff [FILE] [--json]")
	}
	def := triage.Default()
	out := policyDiffOut{Source: "embedded default", DefaultVersion: def.Version()}
	var override []byte
	if len(pos) == 1 {
		if override, err = readFileArg(a, pos[0], maxPolicyFile); err != nil {
			return err
		}
		out.Source = pos[0]
	} else {
		cur, err := a.currentPolicy(ctx)
		if err != nil {
			return err
		}
		if !cur.Valid {
			return fmt.Errorf("the stored override is invalid and not in force: %s", cur.Error)
		}
		if cur.Source != out.Source {
			override, out.Source = []byte(cur.YAML), cur.Source
		}
	}
	p, err := triage.ParseOverride(override)
	if err != nil {
		return err
	}
	out.EffectiveVersion, out.Overlaid, out.EffectiveYAML = p.Version(), *p.Overlaid(), string(p.Canonical())
	if *asJSON {
		return writeJSON(a.stdout, out)
	}
	w := a.stdout
	outf(w, "# override   %s\n# default    %s\n# effective  %s\n", out.Source, out.DefaultVersion, out.EffectiveVersion)
	origins := map[triage.RuleOrigin]string{
		triage.FromDefault: "the default's", triage.Copied: "the default's (copied by the override)",
		triage.Replaced: "the override's, replacing the default's", triage.FromOverride: "the override's (new)",
	}
	fmt.Fprintln(w, "rules, in the order they are tried:")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for i, r := range out.Rules {
		outf(tw, "  %d\t%s\t%s\n", i+1, r.Name, origins[r.Origin])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, name := range out.Deleted {
		outf(w, "deleted by the override: %s\n", name)
	}
	if len(out.Settings) == 0 {
		fmt.Fprintln(w, "settings: the default's")
	} else {
		fmt.Fprintln(w, "settings the override changes (default → effective):")
		for _, c := range out.Settings {
			outf(w, "  %s: %s → %s\n", c.Path, orDash(c.Default), orDash(c.Effective))
		}
	}
	fmt.Fprintln(w, "# the effective policy:")
	yaml := out.EffectiveYAML
	if a.stdoutIsTTY() {
		yaml = terminalLines([]byte(yaml))
	}
	fmt.Fprint(w, yaml)
	return nil
}
