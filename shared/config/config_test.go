package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAuthModes(t *testing.T) {
	base := map[string]string{
		"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q",
		"REPLAY_URL": "https://r", "TASKS_SERVICE_ACCOUNT": "t@p",
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"oidc needs audience and emails", map[string]string{}, "AUTH_AUDIENCE: required when AUTH_MODE is oidc"},
		{"oidc complete", map[string]string{"AUTH_AUDIENCE": "https://r", "AUTH_ALLOWED_EMAILS": "a@p, b@p"}, ""},
		{"none allowed locally", map[string]string{"AUTH_MODE": "none"}, ""},
		{"none refused on Cloud Run", map[string]string{"AUTH_MODE": "none", "K_SERVICE": "replay"}, `AUTH_MODE: "none" is for local emulators only`},
		{"emulator refused on Cloud Run", map[string]string{"AUTH_MODE": "emulator", "K_SERVICE": "replay", "AUTH_AUDIENCE": "a", "AUTH_ALLOWED_EMAILS": "e", "CLOUD_TASKS_EMULATOR_HOST": "h:1"}, `"emulator" is for local emulators only`},
		{"emulator needs the emulator host", map[string]string{"AUTH_MODE": "emulator", "AUTH_AUDIENCE": "a", "AUTH_ALLOWED_EMAILS": "e"}, "CLOUD_TASKS_EMULATOR_HOST: required when AUTH_MODE is emulator"},
		{"unknown mode", map[string]string{"AUTH_MODE": "trust-me"}, `AUTH_MODE: "trust-me" is not one of oidc, emulator, none`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			r := NewReader(MapLookup(env))
			got := ReadHTTPFunction(r)
			err := r.Err()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ReadHTTPFunction(%v) = %v, want nil", tc.env, err)
				}
				if got.Mode == AuthOIDC && len(got.AllowedEmails) != 2 {
					t.Errorf("AllowedEmails = %q, want 2 trimmed items", got.AllowedEmails)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ReadHTTPFunction(%v) = %v, want an error containing %q", tc.env, err, tc.wantErr)
			}
		})
	}
}

func TestReaderTypes(t *testing.T) {
	r := NewReader(MapLookup(map[string]string{"N": "70000", "B": "maybe", "D": "-1s", "D2": "90s", "L": " a, ,b "}))
	if got := r.Int("N", 1, 1, 65535); got != 1 {
		t.Errorf("Int(N) = %d, want the default 1", got)
	}
	if got := r.Bool("B", true); !got {
		t.Errorf("Bool(B) = %v, want the default true", got)
	}
	r.Duration("D", time.Second)
	if got := r.Duration("D2", time.Second); got != 90*time.Second {
		t.Errorf("Duration(D2) = %v, want 90s", got)
	}
	if diff := cmp.Diff([]string{"a", "b"}, r.List("L")); diff != "" {
		t.Errorf("List(L) mismatch:\n%s", diff)
	}
	err := r.Err()
	for _, want := range []string{"N:", "B:", "D:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Err() = %v, want it to name %s", err, want)
		}
	}
}

// LEGACY_COMPLETIONS_UNTIL ends the window in which completion records of
// older agentkits are honoured: every component reads it with the common
// variables, and dlqctl on its own.
func TestLegacyCompletionsUntil(t *testing.T) {
	tests := []struct {
		value   string // "" unset
		want    time.Time
		wantErr string
	}{
		{"", time.Time{}, ""},
		{"2026-12-01T00:00:00Z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ""},
		{" 2026-12-01T01:00:00+01:00 ", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ""},
		{"2026-12-01", time.Time{}, `LEGACY_COMPLETIONS_UNTIL: "2026-12-01" is not an RFC 3339 time`},
		{"72h", time.Time{}, `LEGACY_COMPLETIONS_UNTIL: "72h" is not an RFC 3339 time`},
	}
	for _, tc := range tests {
		env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}
		if tc.value != "" {
			env["LEGACY_COMPLETIONS_UNTIL"] = tc.value
		}
		r := NewReader(MapLookup(env))
		got := ReadCommon(r).LegacyCompletionsUntil
		alone, aloneErr := LoadLegacyCompletionsUntil(MapLookup(env))
		for _, res := range []struct {
			got time.Time
			err error
		}{{got, r.Err()}, {alone, aloneErr}} {
			if !res.got.Equal(tc.want) || (res.err == nil) != (tc.wantErr == "") || res.err != nil && !strings.Contains(res.err.Error(), tc.wantErr) {
				t.Errorf("LEGACY_COMPLETIONS_UNTIL=%q: %v, %v; want %v, %q", tc.value, res.got, res.err, tc.want, tc.wantErr)
			}
		}
	}
}

// dlqctl checks each setting when a command needs it, so nothing is
// required here and an unset variable is empty (NATS_URL: the local stack).
