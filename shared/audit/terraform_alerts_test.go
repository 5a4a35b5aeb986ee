package audit

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The monitoring module has one alert policy per alerting finding, named
// after it, with its severity: a finding added or re-graded here without the
// Terraform table (or the other way round) would log an alert nobody is
// paged for, or keep a policy for an alert that never fires.
func TestTerraformAlertsEqualGo(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "terraform", "modules", "monitoring", "variables.tf"))
	if err != nil {
		t.Fatalf("read the monitoring module's variables: %v", err)
	}
	table := regexp.MustCompile(`(?s)variable "reconcile_alerts" \{.*?\n  default = \{\n(.*?)\n  \}\n`).FindSubmatch(b)
	if table == nil {
		t.Fatal(`variable "reconcile_alerts": no default table found`)
	}
	row := regexp.MustCompile(`(?m)^\s*([a-z0-9_]+)\s*=\s*\{\s*severity\s*=\s*"([A-Z]+)"`)
	got := map[string]string{}
	for _, m := range row.FindAllSubmatch(table[1], -1) {
		got[string(m[1])] = string(m[2])
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
