package jsdlq

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/functions/deliver"
	"github.com/jsdlq/jsdlq/functions/reconcile"
	"github.com/jsdlq/jsdlq/functions/replay"
)

// The HTTP functions the deploy root registers, as each builds itself from
// its environment (FromEnv): a broken configuration
// answers 500 naming the function (Cloud Tasks keeps the task, Cloud
// Scheduler shows the job failing), local-only auth modes are refused on
// Cloud Run, and a good configuration puts authentication in front of the
// function. No request here reaches Firestore, Cloud Tasks or NATS: they are
// refused before.
func TestHTTPFunctionWiring(t *testing.T) {
	base := map[string]string{
		"GOOGLE_CLOUD_PROJECT":      "p",
		"TASKS_QUEUE":               "projects/p/locations/l/queues/dlq-replay",
		"REPLAY_URL":                "https://replay.example/Replay",
		"TASKS_SERVICE_ACCOUNT":     "tasks@p.iam.gserviceaccount.com",
		"AUTH_MODE":                 "emulator",
		"AUTH_ALLOWED_EMAILS":       "caller@p.iam.gserviceaccount.com",
		"CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:1",
		"FIRESTORE_EMULATOR_HOST":   "127.0.0.1:1",
		"NATS_URL":                  "nats://127.0.0.1:1",
		"WORK_STREAMS":              "TASKS",
		"K_SERVICE":                 "",
		"WEBHOOKS_QUEUE":            "projects/p/locations/l/queues/dlq-webhooks",
		"WEBHOOK_DELIVER_URL":       "https://deliver.example/",
		"WEBHOOK_SERVICE_ACCOUNT":   "caller@p.iam.gserviceaccount.com",
		"SECRETS_KMS_KEY":           "projects/p/locations/l/keyRings/r/cryptoKeys/k",
	}
	functions := []struct {
		name  string
		build func() http.Handler
		body  string
	}{
		{"replay", func() http.Handler { return replay.FromEnv(context.Background(), os.LookupEnv, io.Discard) }, `{"entry_id":"TASKS.1","attempt":1}`},
		{"reconcile", func() http.Handler { return reconcile.FromEnv(context.Background(), os.LookupEnv, io.Discard) }, ""},
		{"deliver", func() http.Handler { return deliver.FromEnv(context.Background(), os.LookupEnv, io.Discard) }, `{"webhook_id":"0123456789abcdef","notification_id":"n-00000000000000000000000000000000"}`},
	}
	cases := []struct {
		name     string
		override map[string]string
		want     int
	}{
		{"missing project", map[string]string{"GOOGLE_CLOUD_PROJECT": ""}, http.StatusInternalServerError},
		{"bad time budget", map[string]string{"RECONCILE_TIME_BUDGET": "soon"}, http.StatusInternalServerError},
		// Deliver's audience is WEBHOOK_DELIVER_URL, the fan-out's target.
		{"oidc without audience", map[string]string{"AUTH_MODE": "oidc", "AUTH_AUDIENCE": "", "WEBHOOK_DELIVER_URL": ""}, http.StatusInternalServerError},
		{"auth none on Cloud Run", map[string]string{"AUTH_MODE": "none", "K_SERVICE": "fn"}, http.StatusInternalServerError},
		{"no secrets key", map[string]string{"SECRETS_KMS_KEY": ""}, http.StatusInternalServerError},
		{"no token", nil, http.StatusUnauthorized},
	}
	for _, fn := range functions {
		for _, c := range cases {
			if c.name == "bad time budget" && fn.name != "reconcile" {
				continue // only reconcile reads RECONCILE_TIME_BUDGET
			}
			if c.name == "no secrets key" && fn.name != "deliver" {
				continue // only deliver opens webhook secrets
			}
			t.Run(fn.name+"/"+c.name, func(t *testing.T) {
				t.Setenv("AUTH_AUDIENCE", "https://"+fn.name+".example/")
				for k, v := range base {
					t.Setenv(k, v)
				}
				for k, v := range c.override {
					t.Setenv(k, v)
				}
				w := httptest.NewRecorder()
				fn.build().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(fn.body)))
				if w.Code != c.want {
					t.Errorf("%s %s: status %d, want %d (%s)", fn.name, c.name, w.Code, c.want, strings.TrimSpace(w.Body.String()))
				}
				if c.want == http.StatusInternalServerError && !strings.Contains(w.Body.String(), fn.name+":") {
					t.Errorf("%s %s: body %q does not say which function failed", fn.name, c.name, w.Body.String())
				}
			})
		}
	}
}
