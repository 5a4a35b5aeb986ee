package event_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/jsdlq/jsdlq/internal/tfvars"
	"github.com/jsdlq/jsdlq/shared/event"
)

// Terraform's variable defaults configure the deployed bridge and reconcile;
// they must name the objects the Go defaults name, or a default deployment
// reads one stream while agentkit writes another.
func TestTerraformDefaultsEqualGo(t *testing.T) {
	defaults, err := tfvars.Defaults(filepath.Join("..", "..", "terraform", "variables.tf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		variable string
		want     string
	}{
		{"advisory_stream", event.DefaultAdvisoryStream},
		{"record_stream", event.DefaultRecordStream},
		{"failure_bucket", event.DefaultFailureBucket},
		{"bridge_consumer", event.DefaultBridgeConsumer},
		{"notifications_topic", event.DefaultNotificationsTopic},
		{"changes_topic", event.DefaultChangesTopic},
	} {
		if got, err := tfvars.String(defaults, tt.variable); err != nil || got != tt.want {
			t.Errorf("terraform variable %s default = %q, %v; want %q (shared/event)", tt.variable, got, err, tt.want)
		}
	}
	if got, err := tfvars.Strings(defaults, "work_streams"); err != nil || !slices.Equal(got, []string{event.DefaultWorkStream}) {
		t.Errorf("terraform variable work_streams default = %q, %v; want [%q] (shared/event)", got, err, event.DefaultWorkStream)
	}
}
