package main

import (
	"bytes"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The console is one of the stack's servers: port 8070 unless CONSOLE_PORT
// says otherwise, local operator mode, the scheduling variables every replay
// path needs, and CONSOLE_URL in `stackctl env`.
func TestConsoleInTheStack(t *testing.T) {
	tests := []struct {
		name, port, wantAddr string
	}{
		{"default port", "", "127.0.0.1:8070"},
		{"CONSOLE_PORT", "9170", "127.0.0.1:9170"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CONSOLE_PORT", tt.port)
			s, err := newStack(t.TempDir())
			if err != nil {
				t.Fatalf("newStack() = %v", err)
			}
			if got := s.addr("console"); got != tt.wantAddr {
				t.Errorf("addr(console) = %q, want %q", got, tt.wantAddr)
			}
			var svc *service
			for i := range s.services {
				if s.services[i].name == "console" {
					svc = &s.services[i]
				}
			}
			if svc == nil {
				t.Fatal("newStack() has no console service")
			}
			if svc.readyPath != "/healthz" || svc.build != "./cmd/console" {
				t.Errorf("console service = ready %q build %q, want /healthz and ./cmd/console", svc.readyPath, svc.build)
			}
			spec := svc.spec(s, s.addr("console"))
			for _, want := range []string{"CONSOLE_AUTH=local", "CONSOLE_OPERATOR=local-operator", "CONSOLE_ROLE=approver", "PORT=" + strings.TrimPrefix(tt.wantAddr, "127.0.0.1:"),
				"TASKS_QUEUE=" + s.queue(), "REPLAY_URL=http://" + s.addr("functions") + "/Replay", "FIRESTORE_EMULATOR_HOST=" + s.addr("firestore"),
				// The tenant API seals webhook secrets with the stack's key.
				"SECRETS_LOCAL_KEY_FILE=" + filepath.Join(s.root, ".local", "secrets.key")} {
				if !slices.Contains(spec.Env, want) {
					t.Errorf("console spec env = %q, want it to contain %q", spec.Env, want)
				}
			}
			if !slices.Equal(spec.Args, []string{"--host", "127.0.0.1"}) {
				t.Errorf("console spec args = %q, want --host 127.0.0.1", spec.Args)
			}
		})
	}
}

func TestEnvExportsConsoleURL(t *testing.T) {
	t.Setenv("CONSOLE_PORT", "")
	s, err := newStack("../..")
	if err != nil {
		t.Fatalf("newStack() = %v", err)
	}
	var b bytes.Buffer
	s.printEnv(&b, io.Discard)
	if want := `export CONSOLE_URL="http://127.0.0.1:8070"`; !strings.Contains(b.String(), want+"\n") {
		t.Errorf("printEnv() = %s, want a line %s", b.String(), want)
	}
}
