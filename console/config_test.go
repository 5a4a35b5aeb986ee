package console_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
)

func TestLoadEnv(t *testing.T) {
	base := map[string]string{"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q",
		"REPLAY_URL": "http://127.0.0.1:8080/Replay", "TASKS_SERVICE_ACCOUNT": "t@p.iam.gserviceaccount.com",
		"SECRETS_KMS_KEY": "projects/p/locations/l/keyRings/r/cryptoKeys/k"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		port    int
	}{
		{"iap needs an audience", with("CONSOLE_APPROVERS", "group:ops@example.com"), "CONSOLE_IAP_AUDIENCE", 0},
		{"iap", with("CONSOLE_IAP_AUDIENCE", "/projects/1/locations/l/services/console", "PORT", "9000", "CONSOLE_VIEWERS", "domain:example.com"), "", 9000},
		{"iap needs someone with a role", with("CONSOLE_IAP_AUDIENCE", "/projects/1/locations/l/services/console"), "CONSOLE_APPROVERS", 0},
		{"a malformed principal", with("CONSOLE_IAP_AUDIENCE", "a", "CONSOLE_OPERATORS", "user:ops@example.com, alice@example.com"), "CONSOLE_OPERATORS", 0},
		{"allUsers", with("CONSOLE_IAP_AUDIENCE", "a", "CONSOLE_VIEWERS", "allUsers"), "CONSOLE_VIEWERS", 0},
		{"an unknown local role", with("CONSOLE_AUTH", "local", "CONSOLE_OPERATOR", "me", "FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681", "CONSOLE_ROLE", "admin"), "CONSOLE_ROLE", 0},
		{"local with emulator", with("CONSOLE_AUTH", "local", "CONSOLE_OPERATOR", "me", "FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681"), "", console.DefaultPort},
		{"console port", with("CONSOLE_AUTH", "local", "CONSOLE_OPERATOR", "me", "FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681", "CONSOLE_PORT", "8071"), "", 8071},
		{"local refused on Cloud Run", with("CONSOLE_AUTH", "local", "CONSOLE_OPERATOR", "me", "FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681", "K_SERVICE", "console"), "K_SERVICE", 0},
		{"local refused without emulator", with("CONSOLE_AUTH", "local", "CONSOLE_OPERATOR", "me"), "FIRESTORE_EMULATOR_HOST", 0},
		{"local needs an operator", with("CONSOLE_AUTH", "local", "FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681"), "CONSOLE_OPERATOR", 0},
		{"api only needs no operator auth", with("CONSOLE_SERVE", "api"), "", console.DefaultPort},
		{"unknown part", with("CONSOLE_SERVE", "ui,admin", "CONSOLE_IAP_AUDIENCE", "a"), "CONSOLE_SERVE", 0},
		{"the api needs a sealing key", with("CONSOLE_SERVE", "api", "SECRETS_KMS_KEY", ""), "SECRETS_KMS_KEY", 0},
		{"the ui alone needs none", with("CONSOLE_SERVE", "ui", "CONSOLE_IAP_AUDIENCE", "a", "CONSOLE_VIEWERS", "domain:example.com", "SECRETS_KMS_KEY", ""), "", console.DefaultPort},
		{"cloud run needs its URLs", with("CONSOLE_SERVE", "api", "K_SERVICE", "console-api"), "CONSOLE_URLS", 0},
		{"cloud run with its URLs", with("CONSOLE_SERVE", "api", "K_SERVICE", "console-api", "CONSOLE_URLS", "https://c-1.r.run.app,https://api.example.com"), "", console.DefaultPort},
		{"a URL that is not one", with("CONSOLE_SERVE", "api", "CONSOLE_URLS", "https://c-1.r.run.app,ftp://x"), "CONSOLE_URLS", 0},
		{"a URL with a query", with("CONSOLE_SERVE", "api", "CONSOLE_URLS", "https://c.example/?x=1"), "CONSOLE_URLS", 0},
		{"a URL with a port of leading zeros", with("CONSOLE_SERVE", "api", "CONSOLE_URLS", "https://c.example:0443"), "CONSOLE_URLS", 0},
		{"triage agents need an audience", with("CONSOLE_SERVE", "api", "CONSOLE_TRIAGE_AGENTS", "ceo@p.iam.gserviceaccount.com"), "CONSOLE_TRIAGE_AUDIENCE", 0},
		{"triage agents are emails", with("CONSOLE_SERVE", "api", "CONSOLE_URLS", "https://api.example.com",
			"CONSOLE_TRIAGE_AGENTS", "serviceAccount:ceo@p.iam.gserviceaccount.com,@x"), "CONSOLE_TRIAGE_AGENTS", 0},
		{"triage tokens are verified, never waved through", with("CONSOLE_SERVE", "api", "CONSOLE_URLS", "https://api.example.com",
			"CONSOLE_TRIAGE_AGENTS", "ceo@p.iam.gserviceaccount.com", "CONSOLE_TRIAGE_AUTH", "none"), "CONSOLE_TRIAGE_AUTH", 0},
		{"emulator triage tokens refused on Cloud Run", with("CONSOLE_SERVE", "api", "K_SERVICE", "console-api", "CONSOLE_URLS", "https://api.example.com",
			"CONSOLE_TRIAGE_AGENTS", "ceo@p.iam.gserviceaccount.com", "CONSOLE_TRIAGE_AUTH", "emulator", "CLOUD_TASKS_EMULATOR_HOST", "127.0.0.1:8123"), "CONSOLE_TRIAGE_AUTH", 0},
		{"the triage endpoint is the api's", with("CONSOLE_SERVE", "ui", "CONSOLE_IAP_AUDIENCE", "a", "CONSOLE_VIEWERS", "domain:example.com",
			"CONSOLE_URLS", "https://ui.example.com", "CONSOLE_TRIAGE_AGENTS", "ceo@p.iam.gserviceaccount.com"), "CONSOLE_SERVE", 0},
		{"triage agents on the api", with("CONSOLE_SERVE", "api", "CONSOLE_URLS", "https://api.example.com",
			"CONSOLE_TRIAGE_AGENTS", "ceo@p.iam.gserviceaccount.com"), "", console.DefaultPort},
	}
	for _, tc := range tests {
		got, err := console.LoadEnv(config.MapLookup(tc.env))
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: LoadEnv() = %v, want an error naming %s", tc.name, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: LoadEnv() = %v", tc.name, err)
		case tc.wantErr == "" && got.Port != tc.port:
			t.Errorf("%s: LoadEnv().Port = %d, want %d", tc.name, got.Port, tc.port)
		}
	}
}

// The role variables: each console role's principals behind IAP, and the
// local operator's role (approver unless CONSOLE_ROLE says otherwise).
func TestLoadEnvRoles(t *testing.T) {
	base := map[string]string{"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q",
		"REPLAY_URL": "http://127.0.0.1:8080/Replay", "TASKS_SERVICE_ACCOUNT": "t@p.iam.gserviceaccount.com",
		"SECRETS_KMS_KEY": "projects/p/locations/l/keyRings/r/cryptoKeys/k"}
	env := map[string]string{"CONSOLE_SERVE": "ui", "CONSOLE_IAP_AUDIENCE": "/projects/1/locations/l/services/console",
		"CONSOLE_VIEWERS": "domain:example.com", "CONSOLE_OPERATORS": " group:oncall@example.com, user:ann@example.com ",
		"CONSOLE_APPROVERS": "user:boss@example.com"}
	maps.Copy(env, base)
	got, err := console.LoadEnv(config.MapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	want := map[authority.Role][]string{authority.Viewer: {"domain:example.com"}, authority.Operator: {"group:oncall@example.com", "user:ann@example.com"},
		authority.Approver: {"user:boss@example.com"}}
	if diff := cmp.Diff(want, got.Principals); diff != "" || got.Role != authority.Approver {
		t.Errorf("LoadEnv principals (-want +got):\n%s\nrole %q, want approver by default", diff, got.Role)
	}
	local := map[string]string{"CONSOLE_AUTH": "local", "CONSOLE_OPERATOR": "me", "CONSOLE_ROLE": "viewer", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8681"}
	maps.Copy(local, base)
	if got, err := console.LoadEnv(config.MapLookup(local)); err != nil || got.Role != authority.Viewer {
		t.Errorf("LoadEnv(local viewer) = role %q, %v, want viewer", got.Role, err)
	}
}

// The triage endpoint's callers: the agents' emails, the audience (the
// API's first URL unless set) and Google's tokens unless the emulator's
// are asked for.
func TestLoadEnvTriage(t *testing.T) {
	env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q",
		"REPLAY_URL": "http://127.0.0.1:8080/Replay", "TASKS_SERVICE_ACCOUNT": "t@p.iam.gserviceaccount.com",
		"SECRETS_KMS_KEY": "projects/p/locations/l/keyRings/r/cryptoKeys/k", "CONSOLE_SERVE": "api",
		"CONSOLE_URLS": "https://api.example.com,https://other.example.com", "CONSOLE_TRIAGE_AGENTS": "ceo@p.iam.gserviceaccount.com, cfo@p.iam.gserviceaccount.com"}
	got, err := console.LoadEnv(config.MapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Auth{Mode: config.AuthOIDC, Audience: "https://api.example.com",
		AllowedEmails: []string{"ceo@p.iam.gserviceaccount.com", "cfo@p.iam.gserviceaccount.com"}}
	if diff := cmp.Diff(want, got.Triage); diff != "" {
		t.Errorf("LoadEnv triage (-want +got):\n%s", diff)
	}
	delete(env, "CONSOLE_TRIAGE_AGENTS")
	if got, err := console.LoadEnv(config.MapLookup(env)); err != nil || len(got.Triage.AllowedEmails) != 0 {
		t.Errorf("LoadEnv(no triage agents) = %+v, %v; want no triage endpoint", got.Triage, err)
	}
}

// TestHosts: the URLs the console answers at are CONSOLE_URLS, else the
// loopback addresses of its port, and a specific listen address.
func TestHosts(t *testing.T) {
	tests := []struct {
		env    console.Env
		listen string
		want   []string
	}{
		{console.Env{Port: 8070}, "", []string{"http://127.0.0.1:8070", "http://localhost:8070", "http://[::1]:8070"}},
		{console.Env{Port: 8070}, "127.0.0.1", []string{"http://127.0.0.1:8070", "http://localhost:8070", "http://[::1]:8070"}},
		{console.Env{Port: 8070}, "0.0.0.0", []string{"http://127.0.0.1:8070", "http://localhost:8070", "http://[::1]:8070"}},
		{console.Env{Port: 9000}, "192.168.1.5", []string{"http://127.0.0.1:9000", "http://localhost:9000", "http://[::1]:9000", "http://192.168.1.5:9000"}},
		{console.Env{Port: 8080, URLs: []string{"https://c-1.r.run.app"}}, "", []string{"https://c-1.r.run.app"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.env.Hosts(tt.listen)); diff != "" {
			t.Errorf("Env{Port: %d, URLs: %q}.Hosts(%q) (-want +got):\n%s", tt.env.Port, tt.env.URLs, tt.listen, diff)
		}
	}
}

// TestListenHost: a local-mode console (every request acts as its
// operator) listens on loopback only; behind IAP the flag is used as given.
func TestListenHost(t *testing.T) {
	local := console.Env{Auth: console.AuthLocal, UI: true}
	tests := []struct {
		env     console.Env
		flag    string
		want    string
		wantErr bool
	}{
		{local, "", "127.0.0.1", false},
		{local, "127.0.0.1", "127.0.0.1", false},
		{local, "::1", "::1", false},
		{local, "localhost", "localhost", false},
		{local, "0.0.0.0", "", true},
		{local, "::", "", true},
		{local, "192.168.1.5", "", true},
		{local, "example.com", "", true},
		{console.Env{Auth: console.AuthIAP, UI: true}, "", "", false},
		{console.Env{Auth: console.AuthIAP, UI: true}, "0.0.0.0", "0.0.0.0", false},
		// The tenant API alone authenticates keys, never a local operator.
		{console.Env{Auth: console.AuthLocal, API: true}, "0.0.0.0", "0.0.0.0", false},
	}
	for _, tt := range tests {
		got, err := tt.env.ListenHost(tt.flag)
		if got != tt.want || (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, console.ErrLocalNotLoopback)) {
			t.Errorf("Env{Auth: %s, UI: %v}.ListenHost(%q) = %q, %v, want %q (error %v)", tt.env.Auth, tt.env.UI, tt.flag, got, err, tt.want, tt.wantErr)
		}
	}
}
