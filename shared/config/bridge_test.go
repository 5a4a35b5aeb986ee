package config_test

import (
	"errors"
	"testing"

	"github.com/jsdlq/jsdlq/shared/config"
)

func TestLoadBridgeEnsureTopic(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
		ok   bool
	}{
		{"production default off", map[string]string{}, false, true},
		{"emulator default on", map[string]string{"PUBSUB_EMULATOR_HOST": "127.0.0.1:8682"}, true, true},
		{"emulator explicitly off", map[string]string{"PUBSUB_EMULATOR_HOST": "127.0.0.1:8682", "BRIDGE_ENSURE_TOPIC": "false"}, false, true},
		{"production explicitly on", map[string]string{"BRIDGE_ENSURE_TOPIC": "true"}, true, true},
		{"malformed", map[string]string{"BRIDGE_ENSURE_TOPIC": "sometimes"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}
			for k, v := range tt.env {
				env[k] = v
			}
			c, err := config.LoadBridge(config.MapLookup(env))
			if tt.ok != (err == nil) {
				t.Fatalf("LoadBridge(%v) error = %v, want ok=%v", tt.env, err, tt.ok)
			}
			if err != nil {
				if !errors.Is(err, config.ErrInvalid) {
					t.Errorf("LoadBridge error = %v, want ErrInvalid", err)
				}
				return
			}
			if c.EnsureTopic != tt.want {
				t.Errorf("LoadBridge(%v).EnsureTopic = %v, want %v", tt.env, c.EnsureTopic, tt.want)
			}
		})
	}
}
