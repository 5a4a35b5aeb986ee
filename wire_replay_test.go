package jsdlq

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The deploy root's replay wiring: a broken configuration answers 500 (Cloud
// Tasks keeps the task), local-only auth modes are refused on Cloud Run, and
// a good configuration puts authentication in front of the function. No
// request here reaches Firestore or NATS: they are refused before.
func TestReplayWiring(t *testing.T) {
	base := map[string]string{
		"GOOGLE_CLOUD_PROJECT":      "p",
		"TASKS_QUEUE":               "projects/p/locations/l/queues/dlq-replay",
		"REPLAY_URL":                "https://replay.example/Replay",
		"TASKS_SERVICE_ACCOUNT":     "tasks@p.iam.gserviceaccount.com",
		"AUTH_MODE":                 "emulator",
		"AUTH_AUDIENCE":             "https://replay.example/Replay",
		"AUTH_ALLOWED_EMAILS":       "tasks@p.iam.gserviceaccount.com",
		"CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:1",
		"FIRESTORE_EMULATOR_HOST":   "127.0.0.1:1",
		"NATS_URL":                  "nats://127.0.0.1:1",
		"K_SERVICE":                 "",
	}
	cases := []struct {
		name     string
		override map[string]string
		want     int
	}{
		{"missing project", map[string]string{"GOOGLE_CLOUD_PROJECT": ""}, http.StatusInternalServerError},
		{"auth none on Cloud Run", map[string]string{"AUTH_MODE": "none", "K_SERVICE": "replay"}, http.StatusInternalServerError},
		{"no token", nil, http.StatusUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range base {
				t.Setenv(k, v)
			}
			for k, v := range c.override {
				t.Setenv(k, v)
			}
			h := newReplayHandler()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/Replay", strings.NewReader(`{"entry_id":"TASKS.1","attempt":1}`)))
			if w.Code != c.want {
				t.Errorf("%s: status %d, want %d (%s)", c.name, w.Code, c.want, strings.TrimSpace(w.Body.String()))
			}
		})
	}
}
