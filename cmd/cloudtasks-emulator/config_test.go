package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/config"
)

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want emulatorConfig
	}{
		{map[string]string{}, emulatorConfig{}},
		{map[string]string{"CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:9123", "CLOUD_TASKS_EMULATOR_DATA_DIR": "/d"},
			emulatorConfig{HostPort: "127.0.0.1:9123", DataDir: "/d"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, loadConfig(config.MapLookup(tt.env))); diff != "" {
			t.Errorf("loadConfig(%v) mismatch (-want +got):\n%s", tt.env, diff)
		}
	}
}
