package httpfunc

import (
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/shared/config"
)

// Load reads the shared variables and the function's own with one Reader:
// the shared ones reach Loaded (and the function's read), and a problem in
// each is reported in the same error.
func TestLoad(t *testing.T) {
	base := map[string]string{
		"GOOGLE_CLOUD_PROJECT": "p", "AUTH_MODE": config.AuthNone, "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1",
		"TASKS_QUEUE": "projects/p/locations/l/queues/q", "REPLAY_URL": "http://127.0.0.1:9/Replay",
		"TASKS_SERVICE_ACCOUNT": "tasks@p.iam.gserviceaccount.com",
	}
	type own struct {
		Project string // as read's base saw it
		Limit   int
	}
	read := func(r *config.Reader, b config.HTTPFunction) own {
		return own{Project: b.Project, Limit: r.Int("OWN_LIMIT", 5, 1, 10)}
	}
	tests := []struct {
		name    string
		set     map[string]string // over base; "" unsets
		want    own
		wantErr []string // variables the error names
	}{
		{"defaults", nil, own{Project: "p", Limit: 5}, nil},
		{"own setting", map[string]string{"OWN_LIMIT": "7"}, own{Project: "p", Limit: 7}, nil},
		{"own setting invalid", map[string]string{"OWN_LIMIT": "70"}, own{}, []string{"OWN_LIMIT"}},
		{"both invalid", map[string]string{"OWN_LIMIT": "x", "GOOGLE_CLOUD_PROJECT": ""}, own{}, []string{"OWN_LIMIT", "GOOGLE_CLOUD_PROJECT"}},
	}
	for _, tt := range tests {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range tt.set {
			env[k] = v
		}
		l, err := Load(config.MapLookup(env), read)
		if len(tt.wantErr) == 0 {
			if err != nil || l.Config != tt.want || l.Common.Project != "p" || l.Auth.Mode != config.AuthNone {
				t.Errorf("Load(%s) = %+v, %+v, %+v, %v; want %+v, project p, auth none", tt.name, l.Config, l.Common, l.Auth, err, tt.want)
			}
			continue
		}
		for _, name := range tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Load(%s) error = %v, want it to name %s", tt.name, err, name)
			}
		}
	}
}
