package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/httpfunc"
)

// RECONCILE_PROBE_TIMEOUT sets how long a half-open breaker's probe may stay
// without an outcome; unset leaves the engine's default (store's 30 min).
func TestReadEnvProbeTimeout(t *testing.T) {
	base := map[string]string{
		"GOOGLE_CLOUD_PROJECT": "p", "AUTH_MODE": config.AuthNone, "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1",
		"TASKS_QUEUE": "projects/p/locations/l/queues/q", "REPLAY_URL": "http://127.0.0.1:9/Replay",
		"TASKS_SERVICE_ACCOUNT": "tasks@p.iam.gserviceaccount.com",
	}
	tests := []struct {
		value   string // "" leaves it unset
		want    time.Duration
		wantErr bool
	}{
		{"", 0, false},
		{"45m", 45 * time.Minute, false},
		{"soon", 0, true},
		{"-5m", 0, true},
	}
	for _, tt := range tests {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		if tt.value != "" {
			env["RECONCILE_PROBE_TIMEOUT"] = tt.value
		}
		l, err := httpfunc.Load(config.MapLookup(env), readEnv)
		if gotErr := err != nil && strings.Contains(err.Error(), "RECONCILE_PROBE_TIMEOUT"); gotErr != tt.wantErr || (!tt.wantErr && err != nil) {
			t.Errorf("httpfunc.Load(RECONCILE_PROBE_TIMEOUT=%q) error = %v, want error %v", tt.value, err, tt.wantErr)
		}
		if !tt.wantErr && l.Config.Config.ProbeTimeout != tt.want {
			t.Errorf("httpfunc.Load(RECONCILE_PROBE_TIMEOUT=%q).ProbeTimeout = %s, want %s", tt.value, l.Config.Config.ProbeTimeout, tt.want)
		}
	}
}
