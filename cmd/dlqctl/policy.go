package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func (a *app) cmdPolicy(ctx context.Context, args []string) error {
	return subcommand(ctx, "policy", "policy show | diff [FILE] | validate FILE | apply FILE | test FILE|current EVENT.json",
		map[string]func(context.Context, []string) error{"show": a.policyShow, "diff": a.policyDiff, "validate": a.policyValidate,
			"apply": a.policyApply, "test": a.policyTest}, args)
}

// policyInForce is the override in Firestore, or the embedded default.
type policyInForce struct {
	Source    string    `json:"source"` // "firestore triage-policy/current" | "embedded default"
	Version   string    `json:"version"`
	Valid     bool      `json:"valid"`
	Error     string    `json:"error,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	YAML      string    `json:"yaml"`
	// policy is the policy in force (the default when YAML is invalid).
	policy *triage.Policy
}

func (a *app) currentPolicy(ctx context.Context) (policyInForce, error) {
	st, err := a.store(ctx)
	if err != nil {
		return policyInForce{}, err
	}
	in, err := st.PolicyInForce(ctx)
	if err != nil {
		return policyInForce{}, err
	}
	out := policyInForce{Source: "embedded default", Version: in.Policy.Version(), Valid: in.Invalid == nil, YAML: string(triage.DefaultYAML()), policy: in.Policy}
	if in.Stored {
		out.Source, out.YAML, out.UpdatedAt = "firestore "+triage.OverrideCollection+"/"+triage.OverrideDoc, in.Override.YAML, in.Override.UpdatedAt
	}
	if in.Invalid != nil {
		out.Error = in.Invalid.Error()
	}
	return out, nil
}

// evaluated names where the policy in force comes from: Source shows the
// stored override even when it is invalid, but then the default is what is
// evaluated.
func (p policyInForce) evaluated() string {
	if p.Valid {
		return p.Source
	}
	return "embedded default (the override is invalid)"
}

func (a *app) policyShow(ctx context.Context, args []string) error {
	asJSON, err := parseJSONOnly("policy show", args)
	if err != nil {
		return err
	}
	p, err := a.currentPolicy(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(a.stdout, p)
	}
	outf(a.stdout, "# source: %s\n# version: %s\n", p.Source, p.Version)
	if !p.UpdatedAt.IsZero() {
		outf(a.stdout, "# updated: %s\n", p.UpdatedAt.Format(time.RFC3339))
	}
	if !p.Valid {
		outf(a.stdout, "# INVALID, not in force (the policy in force stays; new instances use the default):\n#   %s\n",
			strings.ReplaceAll(p.Error, "\n", "\n#   "))
	}
	// The document is written as stored (so `policy show > FILE` applies
	// back unchanged), but a terminal gets what it would act on escaped:
	// an override is whatever its author saved.
	yaml := p.YAML
	if a.stdoutIsTTY() {
		yaml = terminalLines([]byte(yaml))
	}
	fmt.Fprint(a.stdout, yaml)
	if !strings.HasSuffix(yaml, "\n") {
		fmt.Fprintln(a.stdout)
	}
	return nil
}

// maxPolicyFile is the largest policy document dlqctl reads (an event file
// is bounded by event.MaxEventBytes).
const maxPolicyFile = 4 << 20

// readFileArg reads the file a command line names, stdin for "-", and
// refuses one of more than limit bytes without reading past the limit. An
// empty file reads as an empty, non-nil slice (io.ReadAll's), which approve
// --edit-payload takes as "edit to empty", not as "no edit".
func readFileArg(a *app, path string, limit int64) ([]byte, error) {
	r, name := a.stdin, "stdin"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		defer f.Close()
		r, name = f, path
	}
	b, err := readAllLimited(r, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}

func (a *app) policyValidate(_ context.Context, args []string) error {
	file, err := parseOne(newFlags("policy validate"), args, "FILE")
	if err != nil {
		return err
	}
	doc, err := readFileArg(a, file, maxPolicyFile)
	if err != nil {
		return err
	}
	p, err := triage.ParseOverride(doc)
	if err != nil {
		return err
	}
	outf(a.stdout, "%s: valid, version %s laid over the default (policy diff %s shows what it changes)\n", file, p.Version(), file)
	return nil
}

func (a *app) policyApply(ctx context.Context, args []string) error {
	file, err := parseOne(newFlags("policy apply"), args, "FILE")
	if err != nil {
		return err
	}
	if a.scope != "" {
		return usagef("the policy covers every tenant; a caller limited to tenant %q cannot apply it", a.scope)
	}
	doc, err := readFileArg(a, file, maxPolicyFile)
	if err != nil {
		return err
	}
	if _, err := triage.ParseOverride(doc); err != nil {
		return err // refused before anything is written
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	prev, err := a.currentPolicy(ctx)
	if err != nil {
		return err
	}
	v, err := st.SavePolicyOverride(ctx, doc)
	if err != nil {
		return err
	}
	outf(a.stdout, "policy %s applied (was %s, %s); classify and replay pick it up within %s\n", v, prev.Version, prev.Source, triage.DefaultRefresh)
	return nil
}

// testResult is what `policy test` prints: the decision and why.
type testResult struct {
	PolicyVersion string               `json:"policy_version"`
	PolicySource  string               `json:"policy_source"`
	EventID       string               `json:"event_id"`
	ReasonCode    string               `json:"reason_code"`
	Route         string               `json:"route"`
	Detail        string               `json:"detail,omitempty"`
	Category      string               `json:"category"`
	Rule          string               `json:"rule"`
	Action        string               `json:"action"`
	Strategy      string               `json:"strategy"`
	Attempt       int                  `json:"attempt"`
	ReplayBudget  int                  `json:"replay_budget"`
	DelayMin      string               `json:"delay_min,omitempty"`
	DelayMax      string               `json:"delay_max,omitempty"`
	Modifications triage.Modifications `json:"modifications"`
	Headers       map[string][]string  `json:"headers,omitempty"` // the Jsdlq-* headers a replay would carry
	EscalateTo    string               `json:"escalate_to,omitempty"`
	Note          string               `json:"note,omitempty"`
	// Retention is how long the entry is kept from its creation (expire_at).
	Retention string `json:"retention"`
	// Approvers are the roles that may approve the entry (the rule's
	// approvers, or its category's default: ApproversFrom "rule" or
	// "category").
	Approvers     []authority.Role `json:"approvers"`
	ApproversFrom string           `json:"approvers_from"`
}

func (a *app) policyTest(ctx context.Context, args []string) error {
	fs := newFlags("policy test")
	asJSON := fs.Bool("json", false, "JSON output")
	chainFlag := fs.String("chain", "", "earlier failures of the replay chain, root first: code[:strategy],…")
	entryID := fs.String("entry", "", "test against a stored entry (its chain included) instead of an event file")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 && !(len(pos) == 1 && *entryID != "") {
		return usagef("policy test FILE|current (EVENT.json | --entry ID) [--chain code:strategy,…] [--json]")
	}
	if *entryID != "" {
		if _, err := entryArg("--entry", *entryID); err != nil {
			return err
		}
	}
	var pol *triage.Policy
	source := pos[0]
	if pos[0] == "current" {
		cur, err := a.currentPolicy(ctx)
		if err != nil {
			return err
		}
		pol, source = cur.policy, cur.evaluated()
	} else {
		doc, err := readFileArg(a, pos[0], maxPolicyFile)
		if err != nil {
			return err
		}
		if pol, err = triage.ParseOverride(doc); err != nil {
			return err
		}
	}
	var in triage.Input
	var chain triage.Chain
	var eventID string
	if *entryID != "" {
		st, err := a.store(ctx)
		if err != nil {
			return err
		}
		e, err := a.getScoped(ctx, st, *entryID, false)
		if err != nil {
			return err
		}
		if in, err = e.PolicyInput(); err != nil {
			return err
		}
		chain = e.PolicyChain()
		eventID = e.EventID
	} else {
		raw, err := readFileArg(a, pos[1], event.MaxEventBytes)
		if err != nil {
			return err
		}
		ev, err := event.Decode(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", pos[1], err)
		}
		headers, err := event.DecodeHeaders(ev.Message.Headers)
		if err != nil {
			return fmt.Errorf("%s: headers: %w", pos[1], err)
		}
		// The entry classify would write for the event, so the test gives
		// the decision classify would make.
		if in, err = store.NewEntry(ev.ID, ev, headers, event.DefaultConventions).PolicyInput(); err != nil {
			return fmt.Errorf("%s: %w", pos[1], err)
		}
		eventID = ev.ID
	}
	if *chainFlag != "" {
		chain = triage.Chain{}
		for _, part := range strings.Split(*chainFlag, ",") {
			code, strat, _ := strings.Cut(strings.TrimSpace(part), ":")
			chain.Codes = append(chain.Codes, code)
			chain.Strategies = append(chain.Strategies, strat)
		}
	}
	d := pol.Evaluate(in, chain)
	minD, maxD := pol.DelayRange(in, chain)
	r := testResult{PolicyVersion: d.PolicyVersion, PolicySource: source, EventID: eventID, ReasonCode: d.ReasonCode, Route: d.Route,
		Detail: d.Detail, Category: string(d.Category), Rule: d.Rule, Action: string(d.Action), Strategy: d.Strategy,
		Attempt: d.Attempt, ReplayBudget: d.ReplayBudget, Modifications: d.Modifications, Note: d.Note,
		Retention: triage.FormatRetention(store.PlanOf(d).Retention())}
	g := pol.Grant(d.Rule, d.Category)
	r.Approvers, r.ApproversFrom = g.Who(), "rule"
	if g.Default {
		r.ApproversFrom = "category"
	}
	if d.Replay() {
		r.DelayMin, r.DelayMax = minD.String(), maxD.String()
		r.Headers = map[string][]string{}
		store.PlanOf(d).Replay("", 0, d.Strategy, nil).Set(r.Headers)
	}
	if d.Action == triage.Escalate {
		r.EscalateTo = d.EscalateTo
	}
	if *asJSON {
		return writeJSON(a.stdout, r)
	}
	w := a.stdout
	outf(w, "policy      %s (%s)\n", r.PolicyVersion, r.PolicySource)
	outf(w, "event       %s  %s  subject %s  tenant %s  agent %s  task type %s\n", eventID, in.Kind, in.Subject, in.Tenant, orDash(in.Agent), orDash(in.TaskType))
	if len(chain.Codes) > 0 {
		outf(w, "chain       %s (root first)\n", strings.Join(chain.Codes, " → "))
	}
	outf(w, "reason      %s (found by %s)%s\n", r.ReasonCode, r.Route, ifSet(r.Detail != "", fmt.Sprintf(": %q", r.Detail)))
	outf(w, "category    %s\n", r.Category)
	outf(w, "rule        %s\n", r.Rule)
	outf(w, "approvers   %s (%s)\n", authority.Join(r.Approvers), map[string]string{"rule": "the rule's approvers", "category": "no approvers in the rule: the category's default"}[r.ApproversFrom])
	outf(w, "retention   %s (expire_at = created_at + %s)\n", r.Retention, r.Retention)
	outf(w, "action      %s  strategy %s  (replays already made by it: %d, left including this one: %d)\n", r.Action, orDash(r.Strategy), r.Attempt, r.ReplayBudget)
	if d.Replay() {
		outf(w, "delay       %s – %s\n", r.DelayMin, r.DelayMax)
		fmt.Fprintln(w, "replay carries")
		writeHeaders(w, r.Headers)
		if m := d.Modifications; m.AlternateSubject != "" {
			outf(w, "  subject → %s (alternate agent %s)\n", m.AlternateSubject, m.AlternateAgent)
		}
	}
	if r.EscalateTo != "" {
		outf(w, "escalate to %s\n", r.EscalateTo)
	}
	if r.Note != "" {
		outf(w, "note        %s\n", r.Note)
	}
	return nil
}

func readAllLimited(r io.Reader, n int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, n+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > n {
		return nil, fmt.Errorf("more than %d bytes", n)
	}
	return b, nil
}
