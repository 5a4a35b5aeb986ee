package store

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// PolicyInForce is what a fresh classify or replay evaluates: the default
// without an override, a valid override, and the default again (with the
// reason) when the stored override does not parse.
func TestPolicyInForce(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	// An override that makes timeouts permanent: another version.
	valid := strings.Replace(string(triage.DefaultYAML()), "\n  timeout: transient\n", "\n  timeout: permanent\n", 1)
	over, err := triage.Parse([]byte(valid))
	def := triage.Default().Version()
	if err != nil || over.Version() == def {
		t.Fatalf("the override parses to %v, %v; the test needs a valid policy other than the default", over, err)
	}
	for _, tt := range []struct {
		name    string
		stored  string // "": no override
		version string
		invalid bool
	}{
		{"no override", "", def, false},
		{"valid override", valid, over.Version(), false},
		{"invalid override", "rules: [", def, true},
	} {
		if tt.stored != "" {
			// Written directly: SavePolicyOverride refuses an invalid one.
			if _, err := s.fs.Collection(PolicyOverrideCollection).Doc(PolicyOverrideDoc).Set(ctx, map[string]any{PolicyOverrideField: tt.stored}); err != nil {
				t.Fatal(err)
			}
		}
		in, err := s.PolicyInForce(ctx)
		if err != nil {
			t.Fatalf("%s: PolicyInForce() = %v", tt.name, err)
		}
		if in.Policy.Version() != tt.version || (in.Invalid != nil) != tt.invalid || in.Stored != (tt.stored != "") || in.Override.YAML != tt.stored {
			t.Errorf("%s: PolicyInForce() = version %s, invalid %v, stored %v (%q), want version %s, invalid %v, the override as written",
				tt.name, in.Policy.Version(), in.Invalid, in.Stored, in.Override.YAML, tt.version, tt.invalid)
		}
	}
}

// The loader over the store: what an operator saves is in force on the next
// read, an invalid document is refused before it is written, one written
// around that check is rejected by the loader, and removing it returns to
// the default.
func TestPolicyLoaderOverride(t *testing.T) {
	s, _ := newStore(t)
	fs := s.fs
	ctx := testenv.Context(t)
	var logs bytes.Buffer
	l := s.PolicyLoader(obs.NewLogger(&logs), triage.WithRefresh(0))

	// No override: the embedded default.
	if got, want := l.Current(ctx).Version(), triage.Default().Version(); got != want {
		t.Fatalf("Current() without override = %s, want default %s", got, want)
	}

	good := strings.Replace(string(triage.DefaultYAML()), "escalation_target: ceo", "escalation_target: oncall", 1)
	v, err := s.SavePolicyOverride(ctx, []byte(good))
	if err != nil {
		t.Fatalf("SavePolicyOverride(good) = %v", err)
	}
	p := l.Current(ctx)
	if p.Version() != v || p.EscalationTarget() != "oncall" {
		t.Fatalf("Current() = %s (target %s), want override %s (target oncall)", p.Version(), p.EscalationTarget(), v)
	}

	// SavePolicyOverride refuses an invalid document before it reaches Firestore.
	bad := strings.Replace(good, "strategy: hallucination_loop\n", "strategy: {delay: {base: 0s}, max_replays: 1}\n", 1)
	if _, err := s.SavePolicyOverride(ctx, []byte(bad)); err == nil || !strings.Contains(err.Error(), "rule 9 (name hallucination): strategy.delay.base") {
		t.Fatalf("SavePolicyOverride(bad) = %v, want an error naming rule 9", err)
	}

	// An operator writing the document directly bypasses that check: the
	// loader rejects it, names the rule and keeps the previous policy.
	if _, err := fs.Collection(PolicyOverrideCollection).Doc(PolicyOverrideDoc).Set(ctx, map[string]any{PolicyOverrideField: bad}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if got := l.Current(ctx).Version(); got != v {
			t.Fatalf("Current() after a bad override = %s, want previous %s", got, v)
		}
	}
	if err := l.LastError(); err == nil || !strings.Contains(err.Error(), "rule 9 (name hallucination): strategy.delay.base") {
		t.Errorf("LastError() = %v, want the rule named", err)
	}
	if n := strings.Count(logs.String(), "override rejected"); n != 1 {
		t.Errorf("rejection logged %d times, want once per bad document:\n%s", n, logs.String())
	}

	// Removing the override returns to the default.
	if _, err := fs.Collection(PolicyOverrideCollection).Doc(PolicyOverrideDoc).Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := l.Current(ctx).Version(), triage.Default().Version(); got != want {
		t.Errorf("Current() after delete = %s, want default %s", got, want)
	}
	if err := l.LastError(); err != nil {
		t.Errorf("LastError() = %v, want nil", err)
	}
}
