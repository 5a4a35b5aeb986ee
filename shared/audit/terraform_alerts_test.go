package audit

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/zclconf/go-cty/cty"

	"github.com/jsdlq/jsdlq/internal/tfvars"
)

// The monitoring module has one alert policy per alerting finding, named
// after it, with its severity: a finding added or re-graded here without the
// Terraform table (or the other way round) would log an alert nobody is
// paged for, or keep a policy for an alert that never fires.
func TestTerraformAlertsEqualGo(t *testing.T) {
	defaults, err := tfvars.Defaults(filepath.Join("..", "..", "terraform", "modules", "monitoring", "variables.tf"))
	if err != nil {
		t.Fatal(err)
	}
	table, ok := defaults["reconcile_alerts"]
	if !ok || table.IsNull() || !table.CanIterateElements() {
		t.Fatalf(`variable "reconcile_alerts": default = %#v, want a table of alerts`, table)
	}
	got := map[string]string{}
	for it := table.ElementIterator(); it.Next(); {
		name, row := it.Element()
		if !row.Type().IsObjectType() || !row.Type().HasAttribute("severity") || row.GetAttr("severity").Type() != cty.String {
			t.Fatalf("reconcile_alerts[%s] = %#v, want an object with a severity", name.AsString(), row)
		}
		got[name.AsString()] = row.GetAttr("severity").AsString()
	}
	want := map[string]string{}
	for name, sev := range severity {
		if sev != SevInfo {
			want[name] = sev
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("terraform reconcile_alerts (+) differ from the alerting findings of shared/audit (-):\n%s", diff)
	}
}
