package bridge_test

import (
	"math/big"
	"path/filepath"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/tfvars"
)

// Terraform's stream limits are what a deployed bridge creates the capture
// streams with; their defaults are the bridge's own, so a deployment sized
// by Terraform and a bridge run without it create the same streams.
func TestTerraformLimitsEqualGo(t *testing.T) {
	defaults, err := tfvars.Defaults(filepath.Join("..", "terraform", "variables.tf"))
	if err != nil {
		t.Fatal(err)
	}
	for variable, want := range map[string]bridge.StreamLimits{
		"advisory_stream_limits": bridge.DefaultAdvisoryLimits,
		"record_stream_limits":   bridge.DefaultRecordLimits,
	} {
		v, ok := defaults[variable]
		if !ok || !v.Type().IsObjectType() {
			t.Errorf("terraform variable %s default = %#v, want an object", variable, v)
			continue
		}
		num := func(attr string) int64 {
			if !v.Type().HasAttribute(attr) || v.GetAttr(attr).Type() != cty.Number {
				t.Errorf("terraform variable %s default has no number %s", variable, attr)
				return -1
			}
			n, _ := v.GetAttr(attr).AsBigFloat().Int(new(big.Int))
			return n.Int64()
		}
		got := bridge.StreamLimits{MaxMsgs: num("max_msgs"), MaxBytes: num("max_bytes")}
		if got.MaxMsgs != want.MaxMsgs || got.MaxBytes != want.MaxBytes || want.MaxAge != 0 {
			t.Errorf("terraform variable %s default = %+v, want %+v (bridge)", variable, got, want)
		}
	}
}
