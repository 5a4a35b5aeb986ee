package triage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file lays an operator's override over the default policy
// (docs/policy.md, "Overriding the default"). The override is an overlay,
// not a replacement, so a reason code, pattern or rule added to the default
// reaches a deployment whose override predates it:
//
//   - rules are matched by name: an override rule with a default rule's
//     name replaces it whole. The effective rules are the override's, in
//     its order, with each default rule the override does not name placed
//     right before the rule that follows it in the default, or at the end
//     when none does. So a new rule of the override goes after the default
//     rule the override names before it (a partial override with only new
//     rules puts them first), and a complete copy keeps its order. A rule
//     `{name: N, delete: true}` takes the default's rule N out.
//   - patterns: the override's that the default does not have (same code
//     and text), in its order, tried before all of the default's.
//   - every other setting overlays key by key, at every depth (a mapping
//     merges; a value or a list of the override replaces the default's; a
//     null leaves the default's).
//
// A complete copy of the default as it was overlays to itself plus what the
// default gained since.

// RuleOrigin says where an effective rule comes from.
type RuleOrigin string

// Rule origins.
const (
	FromDefault  RuleOrigin = "default"  // the default's rule; the override does not name it
	FromOverride RuleOrigin = "override" // a rule only the override has
	// Replaced: the override's rule of a default rule's name, which differs
	// from the default's.
	Replaced RuleOrigin = "replaced"
	// Copied: the override names a default rule and repeats it unchanged.
	Copied RuleOrigin = "copied"
)

// EffectiveRule is a rule of the policy in force, in the order rules are tried.
type EffectiveRule struct {
	Name   string     `json:"name"`
	Origin RuleOrigin `json:"origin"`
}

// SettingChange is a setting (not a rule) whose effective value differs
// from the default's: Path is its place in the document
// ("defaults.jitter", "reasons.my_code"); Default and Effective its YAML
// values, "" when absent.
type SettingChange struct {
	Path      string `json:"path"`
	Default   string `json:"default"`
	Effective string `json:"effective"`
}

// Overlaid is what an override changes in the default.
type Overlaid struct {
	Rules    []EffectiveRule `json:"rules"`
	Deleted  []string        `json:"deleted_rules,omitempty"`
	Settings []SettingChange `json:"settings,omitempty"`
}

// Overlaid is what the override the policy was made with changes in the
// default; nil for a policy parsed on its own (Parse, Default).
func (p *Policy) Overlaid() *Overlaid { return p.overlaid }

// ParseOverride returns the policy an override document makes over the
// embedded default (Overlay). An empty document is the default.
func ParseOverride(override []byte, opts ...Option) (*Policy, error) {
	return Overlay(defaultYAML, override, opts...)
}

// Overlay returns the policy override makes over base, validated as a whole
// (Parse), with what the override changed (Policy.Overlaid).
func Overlay(base, override []byte, opts ...Option) (*Policy, error) {
	b, err := decodeMap(base, "the default")
	if err != nil {
		return nil, err
	}
	o, err := decodeMap(override, "the override")
	if err != nil {
		return nil, err
	}
	merged, changes, err := overlayDoc(b, o)
	if err != nil {
		return nil, err
	}
	doc, err := yaml.Marshal(merged)
	if err != nil {
		return nil, fmt.Errorf("triage: overlay yaml: %w", err)
	}
	p, err := Parse(doc, opts...)
	if err != nil {
		return nil, err
	}
	p.overlaid = changes
	return p, nil
}

// decodeMap reads a policy document as YAML data: a mapping, or nothing.
func decodeMap(doc []byte, what string) (map[string]any, error) {
	var m map[string]any
	if err := yaml.NewDecoder(bytes.NewReader(doc)).Decode(&m); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: yaml: %w", ErrInvalid, what, err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

func overlayDoc(base, over map[string]any) (map[string]any, *Overlaid, error) {
	out := maps.Clone(base)
	for k, v := range over {
		switch k {
		case "rules", "patterns":
		default:
			out[k] = overlayValue(base[k], v)
		}
	}
	rules, effective, deleted, err := overlayRules(base["rules"], over["rules"])
	if err != nil {
		return nil, nil, err
	}
	out["rules"] = rules
	if over["patterns"] != nil {
		out["patterns"] = overlayPatterns(base["patterns"], over["patterns"])
	}
	changes := &Overlaid{Rules: effective, Deleted: deleted}
	for _, k := range slices.Sorted(maps.Keys(out)) {
		if k != "rules" {
			changes.Settings = append(changes.Settings, settingChanges(k, base[k], out[k])...)
		}
	}
	return out, changes, nil
}

// overlayValue is over laid on base: mappings merge key by key, anything
// else of the override replaces the default's, a null keeps it.
func overlayValue(base, over any) any {
	if over == nil {
		return base
	}
	bm, bok := base.(map[string]any)
	om, ook := over.(map[string]any)
	if !bok || !ook {
		return over
	}
	out := maps.Clone(bm)
	for k, v := range om {
		out[k] = overlayValue(bm[k], v)
	}
	return out
}

// overlayRules merges the rule lists by name (the file comment says how).
func overlayRules(base, over any) (rules []any, effective []EffectiveRule, deleted []string, err error) {
	bl, _ := base.([]any)
	ol, ok := over.([]any)
	if over != nil && !ok {
		return nil, nil, nil, fmt.Errorf("%w: the override's rules: a list of rules", ErrInvalid)
	}
	defaults := map[string]any{}
	var defaultOrder []string
	for _, r := range bl {
		name := ruleName(r)
		defaults[name] = r
		defaultOrder = append(defaultOrder, name)
	}
	type placed struct {
		name   string
		rule   any
		origin RuleOrigin
	}
	var list []placed
	named := map[string]bool{}
	for i, r := range ol {
		name := ruleName(r)
		if m, ok := r.(map[string]any); ok && m["delete"] != nil {
			if del, ok := m["delete"].(bool); !ok || !del || len(m) != 2 {
				return nil, nil, nil, fmt.Errorf("%w: the override's rule %d (name %s): delete: true takes the default's rule out, and goes with its name alone", ErrInvalid, i+1, name)
			}
			if _, ok := defaults[name]; !ok {
				return nil, nil, nil, fmt.Errorf("%w: the override's rule %d: delete: the default has no rule %q", ErrInvalid, i+1, name)
			}
			named[name] = true
			deleted = append(deleted, name)
			continue
		}
		origin := FromOverride
		if d, ok := defaults[name]; ok && name != "" {
			origin = Replaced
			if reflect.DeepEqual(d, r) {
				origin = Copied
			}
		}
		if name != "" {
			named[name] = true
		}
		list = append(list, placed{name, r, origin})
	}
	// Each default rule the override does not name goes before the next
	// default rule the override keeps (deleted ones keep no place), else
	// at the end; walking the default backwards keeps their order.
	for i := len(defaultOrder) - 1; i >= 0; i-- {
		name := defaultOrder[i]
		if named[name] {
			continue
		}
		at := len(list)
		for _, next := range defaultOrder[i+1:] {
			if j := slices.IndexFunc(list, func(p placed) bool { return p.name == next }); j >= 0 {
				at = j
				break
			}
		}
		list = slices.Insert(list, at, placed{name, defaults[name], FromDefault})
	}
	for _, p := range list {
		rules = append(rules, p.rule)
		effective = append(effective, EffectiveRule{Name: p.name, Origin: p.origin})
	}
	return rules, effective, deleted, nil
}

func ruleName(r any) string {
	m, _ := r.(map[string]any)
	name, _ := m["name"].(string)
	return name
}

// overlayPatterns are the override's patterns the default does not have,
// then the default's.
func overlayPatterns(base, over any) any {
	ol, ok := over.([]any)
	if !ok {
		return over // not a list: Parse says what is wrong with it
	}
	bl, _ := base.([]any)
	var out []any
	for _, p := range ol {
		if !containsValue(bl, p) && !containsValue(out, p) {
			out = append(out, p)
		}
	}
	return append(out, bl...)
}

func containsValue(l []any, v any) bool {
	return slices.ContainsFunc(l, func(o any) bool { return reflect.DeepEqual(o, v) })
}

// settingChanges are the leaves under path where effective differs from base.
func settingChanges(path string, base, effective any) []SettingChange {
	if reflect.DeepEqual(base, effective) {
		return nil
	}
	bm, bok := base.(map[string]any)
	em, eok := effective.(map[string]any)
	if bok && eok {
		var out []SettingChange
		keys := maps.Clone(em)
		maps.Copy(keys, bm)
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			out = append(out, settingChanges(path+"."+k, bm[k], em[k])...)
		}
		return out
	}
	bl, bok := base.([]any)
	el, eok := effective.([]any)
	if bok && eok {
		// A list by its elements: those it gained, those it lost.
		var out []SettingChange
		for _, v := range el {
			if !containsValue(bl, v) {
				out = append(out, SettingChange{Path: path + "[+]", Effective: yamlText(v)})
			}
		}
		for _, v := range bl {
			if !containsValue(el, v) {
				out = append(out, SettingChange{Path: path + "[-]", Default: yamlText(v)})
			}
		}
		if out == nil { // the same elements, in another order
			out = []SettingChange{{Path: path, Default: yamlText(base), Effective: yamlText(effective)}}
		}
		return out
	}
	return []SettingChange{{Path: path, Default: yamlText(base), Effective: yamlText(effective)}}
}

// yamlText is v as one line of YAML ("" when absent).
func yamlText(v any) string {
	if v == nil {
		return ""
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSpace(b.String())
	if strings.Contains(s, "\n") {
		// A mapping or list: its flow form, on one line.
		n := &yaml.Node{}
		if n.Encode(v) == nil {
			setFlow(n)
			if out, err := yaml.Marshal(n); err == nil {
				return strings.TrimSpace(string(out))
			}
		}
	}
	return s
}

func setFlow(n *yaml.Node) {
	n.Style |= yaml.FlowStyle
	for _, c := range n.Content {
		setFlow(c)
	}
}
