package jsdlq

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The deploy root's reconcile wiring: a broken configuration answers 500 with
// a clear message (Cloud Scheduler shows the job failing), and a good one
// puts authentication in front of the function. No request here reaches
// Firestore, Cloud Tasks or NATS: they are refused before.
func TestReconcileWiring(t *testing.T) {
	base := map[string]string{
		"GOOGLE_CLOUD_PROJECT":      "p",
		"TASKS_QUEUE":               "projects/p/locations/l/queues/dlq-replay",
		"REPLAY_URL":                "https://replay.example/Replay",
		"TASKS_SERVICE_ACCOUNT":     "tasks@p.iam.gserviceaccount.com",
		"AUTH_MODE":                 "emulator",
		"AUTH_AUDIENCE":             "https://reconcile.example/Reconcile",
		"AUTH_ALLOWED_EMAILS":       "scheduler@p.iam.gserviceaccount.com",
		"CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:1",
		"FIRESTORE_EMULATOR_HOST":   "127.0.0.1:1",
		"NATS_URL":                  "nats://127.0.0.1:1",
		"WORK_STREAMS":              "TASKS",
		"K_SERVICE":                 "",
	}
	cases := []struct {
		name     string
		override map[string]string
		want     int
	}{
		{"missing project", map[string]string{"GOOGLE_CLOUD_PROJECT": ""}, http.StatusInternalServerError},
		{"bad time budget", map[string]string{"RECONCILE_TIME_BUDGET": "soon"}, http.StatusInternalServerError},
		{"oidc without audience", map[string]string{"AUTH_MODE": "oidc", "AUTH_AUDIENCE": ""}, http.StatusInternalServerError},
		{"auth none on Cloud Run", map[string]string{"AUTH_MODE": "none", "K_SERVICE": "reconcile"}, http.StatusInternalServerError},
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
			h := newReconcileHandler()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/Reconcile", nil))
			if w.Code != c.want {
				t.Errorf("%s: status %d, want %d (%s)", c.name, w.Code, c.want, strings.TrimSpace(w.Body.String()))
			}
			if c.want == http.StatusInternalServerError && !strings.Contains(w.Body.String(), "reconcile:") {
				t.Errorf("%s: body %q does not say what failed", c.name, w.Body.String())
			}
		})
	}
}
