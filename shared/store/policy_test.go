package store

import (
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
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
			if _, err := s.fs.Collection(triage.OverrideCollection).Doc(triage.OverrideDoc).Set(ctx, map[string]any{triage.OverrideField: tt.stored}); err != nil {
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
