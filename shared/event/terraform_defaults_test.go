package event_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/jsdlq/jsdlq/shared/event"
)

// Terraform's variable defaults configure the deployed bridge and reconcile;
// they must name the objects the Go defaults name, or a default deployment
// reads one stream while agentkit writes another.
func TestTerraformDefaultsEqualGo(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "terraform", "variables.tf"))
	if err != nil {
		t.Fatalf("read terraform/variables.tf: %v", err)
	}
	tf := string(b)
	tests := []struct {
		variable string
		want     string
	}{
		{"advisory_stream", `"` + event.DefaultAdvisoryStream + `"`},
		{"record_stream", `"` + event.DefaultRecordStream + `"`},
		{"failure_bucket", `"` + event.DefaultFailureBucket + `"`},
		{"bridge_consumer", `"` + event.DefaultBridgeConsumer + `"`},
		{"work_streams", `["` + event.DefaultWorkStream + `"]`},
		{"notifications_topic", `"` + event.DefaultNotificationsTopic + `"`},
	}
	for _, tt := range tests {
		re := regexp.MustCompile(`(?s)variable "` + tt.variable + `" \{.*?\n\s*default\s*=\s*([^\n]+)\n`)
		m := re.FindStringSubmatch(tf)
		if m == nil {
			t.Errorf("terraform variable %s: no default found", tt.variable)
			continue
		}
		if m[1] != tt.want {
			t.Errorf("terraform variable %s default = %s, want %s (shared/event)", tt.variable, m[1], tt.want)
		}
	}
}
