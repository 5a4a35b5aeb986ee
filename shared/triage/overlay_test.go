package triage

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ruleNames are the effective rules' names and origins, as "name origin".
func ruleNames(p *Policy) []string {
	var out []string
	for _, r := range p.Overlaid().Rules {
		out = append(out, r.Name+" "+string(r.Origin))
	}
	return out
}

// An override that predates a reason code, pattern and rule of the default
// (a complete copy of the default as it was, with changes of its own) gets
// them: the new code is categorised and routed by the new rule, and the
// override's own changes stay.
func TestNewDefaultCodeReachesAnOlderOverride(t *testing.T) {
	old := string(DefaultYAML())
	edit := func(doc, old, new string) string {
		t.Helper()
		if !strings.Contains(doc, old) {
			t.Fatalf("the default no longer contains %q", old)
		}
		return strings.Replace(doc, old, new, 1)
	}
	// The override, saved when the default was old: jitter and the
	// transient rule's strategy are its own.
	override := edit(old, "jitter: 0.2", "jitter: 0.1")
	override = edit(override, "  - name: transient\n    match: {category: [transient]}\n    action: auto_replay\n    strategy: transient\n",
		"  - name: transient\n    match: {category: [transient]}\n    action: auto_replay\n    strategy: default\n")
	// The default since: a new code, a pattern that finds it, and a rule
	// that quarantines it, placed before the transient rule.
	current := edit(old, "  unknown: unknown\n", "  quota_exhausted: permanent\n  unknown: unknown\n")
	current = edit(current, "patterns:\n", "patterns:\n  - code: quota_exhausted\n    text: '(?i)quota exhausted'\n")
	current = edit(current, "  - name: transient\n", "  - name: quota\n    match: {reason_code: [quota_exhausted]}\n    action: quarantine\n    strategy: none\n  - name: transient\n")

	before, err := Overlay([]byte(old), []byte(override))
	if err != nil {
		t.Fatal(err)
	}
	after, err := Overlay([]byte(current), []byte(override))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    *Policy
		in   Input
		want Decision
	}{
		{"before: an unknown code", before, Input{Kind: "terminated", TermReason: "quota_exhausted"},
			Decision{ReasonCode: "quota_exhausted", Category: Unknown, Rule: "default", Action: AutoReplay}},
		{"after: the new code by its code", after, Input{Kind: "terminated", TermReason: "quota_exhausted"},
			Decision{ReasonCode: "quota_exhausted", Category: Permanent, Rule: "quota", Action: Quarantine}},
		{"after: the new code by the new pattern", after, Input{Kind: "terminated", TermReason: "Quota exhausted for project"},
			Decision{ReasonCode: "quota_exhausted", Category: Permanent, Rule: "quota", Action: Quarantine}},
		{"after: the override's own rule stays", after, Input{Kind: "terminated", TermReason: "timeout"},
			Decision{ReasonCode: "timeout", Category: Transient, Rule: "transient", Action: AutoReplay, Strategy: "default"}},
	} {
		d := tc.p.Evaluate(tc.in, Chain{})
		got := Decision{ReasonCode: d.ReasonCode, Category: d.Category, Rule: d.Rule, Action: d.Action}
		if tc.want.Strategy != "" {
			got.Strategy = d.Strategy
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Evaluate(%+v) (-want +got):\n%s", tc.name, tc.in, diff)
		}
	}
	if got := after.doc.Defaults.Jitter; got != 0.1 {
		t.Errorf("jitter = %v, want the override's 0.1", got)
	}
	// What the operator sees: the new rule from the default, the replaced
	// one from the override, the rest copies.
	for _, want := range []string{"quota default", "transient replaced", "poison-chain copied"} {
		if !strings.Contains(strings.Join(ruleNames(after), ","), want) {
			t.Errorf("effective rules %v, want %q among them", ruleNames(after), want)
		}
	}
	wantSettings := []SettingChange{{Path: "defaults.jitter", Default: "0.2", Effective: "0.1"}}
	if diff := cmp.Diff(wantSettings, after.Overlaid().Settings); diff != "" {
		t.Errorf("settings changed (-want +got):\n%s", diff)
	}
}

// The empty override and a complete copy of the default are the default:
// the same version, every rule the default's.
func TestOverlayOfTheDefaultIsTheDefault(t *testing.T) {
	def := Default()
	for name, doc := range map[string]string{"empty": "", "comment only": "# nothing\n", "a copy": string(DefaultYAML())} {
		p, err := ParseOverride([]byte(doc))
		if err != nil {
			t.Fatalf("%s: ParseOverride() = %v", name, err)
		}
		if p.Version() != def.Version() {
			t.Errorf("%s: version %s, want the default's %s", name, p.Version(), def.Version())
		}
		if s := p.Overlaid().Settings; len(s) != 0 {
			t.Errorf("%s: settings changed %v, want none", name, s)
		}
		for _, r := range p.Overlaid().Rules {
			if r.Origin != FromDefault && r.Origin != Copied {
				t.Errorf("%s: rule %s from %s, want the default's", name, r.Name, r.Origin)
			}
		}
	}
}

// Where the override's rules go among the default's, and how one is deleted.
func TestOverlayRuleOrder(t *testing.T) {
	base := `
defaults: {escalation_target: ceo}
capabilities: {fallback: ceo}
reasons: {timeout: transient, unknown: unknown}
strategies: {default: {delay: {base: 120s}, max_replays: 1}, none: {max_replays: 0}}
rules:
  - {name: a, match: {reason_code: [timeout]}, action: escalate, strategy: none}
  - {name: b, match: {category: [transient]}, action: auto_replay, strategy: default}
  - {name: c, match: {category: [permanent]}, action: escalate, strategy: none}
  - {name: default, match: {}, action: auto_replay, strategy: default}
`
	tests := []struct {
		name     string
		override string
		want     []string
		deleted  []string
	}{
		{"none", ``, []string{"a default", "b default", "c default", "default default"}, nil},
		{"replaced in place", `rules: [{name: b, match: {category: [transient]}, action: escalate, strategy: none}]`,
			[]string{"a default", "b replaced", "c default", "default default"}, nil},
		{"a new rule first", `rules: [{name: mine, match: {agent: [x]}, action: escalate, strategy: none}]`,
			[]string{"mine override", "a default", "b default", "c default", "default default"}, nil},
		{"a new rule after the default rule named before it", `rules: [{name: b, match: {category: [transient]}, action: auto_replay, strategy: default},
  {name: mine, match: {agent: [x]}, action: escalate, strategy: none}]`,
			[]string{"a default", "b copied", "mine override", "c default", "default default"}, nil},
		{"a new rule before the default rule named after it", `rules: [{name: mine, match: {agent: [x]}, action: escalate, strategy: none},
  {name: c, match: {category: [permanent]}, action: escalate, strategy: none}]`,
			[]string{"mine override", "a default", "b default", "c copied", "default default"}, nil},
		{"reordered by the override", `rules: [{name: default, match: {}, action: auto_replay, strategy: default},
  {name: a, match: {reason_code: [timeout]}, action: escalate, strategy: none}]`,
			[]string{"b default", "c default", "default copied", "a copied"}, nil},
		{"deleted", `rules: [{name: b, delete: true}]`,
			[]string{"a default", "c default", "default default"}, []string{"b"}},
	}
	for _, tc := range tests {
		p, err := Overlay([]byte(base), []byte(tc.override))
		if err != nil {
			t.Fatalf("%s: Overlay() = %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, ruleNames(p)); diff != "" {
			t.Errorf("%s: rules (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(tc.deleted, p.Overlaid().Deleted); diff != "" {
			t.Errorf("%s: deleted (-want +got):\n%s", tc.name, diff)
		}
	}
	for _, bad := range []string{
		`rules: [{name: nope, delete: true}]`,
		`rules: [{name: b, delete: false}]`,
		`rules: [{name: b, delete: true, action: escalate}]`,
		`rules: {name: b}`,
		`rules: [{name: b, match: {}, action: explode, strategy: none}]`,
		`defaults: [1, 2]`,
		`- a list`,
	} {
		if _, err := Overlay([]byte(base), []byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Overlay(%s) = %v, want ErrInvalid", bad, err)
		}
	}
}
