package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
)

func TestSeverity(t *testing.T) {
	tests := []struct {
		in   slog.Level
		want string
	}{
		{slog.LevelDebug, "DEBUG"}, {slog.LevelInfo, "INFO"}, {LevelNotice, "NOTICE"},
		{slog.LevelWarn, "WARNING"}, {slog.LevelError, "ERROR"}, {LevelCritical, "CRITICAL"},
	}
	for _, tc := range tests {
		if got := Severity(tc.in); got != tc.want {
			t.Errorf("Severity(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(b), &m); err != nil {
		t.Fatalf("log line %q is not JSON: %v", b, err)
	}
	return m
}

func TestLoggerUsesCloudLoggingKeys(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, WithComponent("bridge"))
	log.Warn("publish failed", "token", Secret("s3cr3t"))
	m := decode(t, buf.Bytes())
	if m["severity"] != "WARNING" || m["message"] != "publish failed" || m["component"] != "bridge" {
		t.Errorf("entry = %v, want severity WARNING, message, component", m)
	}
	if _, err := time.Parse(time.RFC3339Nano, m["timestamp"].(string)); err != nil {
		t.Errorf("timestamp %v is not RFC 3339: %v", m["timestamp"], err)
	}
	for _, k := range []string{"level", "msg", "time"} {
		if _, ok := m[k]; ok {
			t.Errorf("entry has slog key %q; Cloud Logging would not read it", k)
		}
	}
	if m["token"] != "[redacted]" {
		t.Errorf("secret logged as %v, want [redacted]", m["token"])
	}
}

func TestTraceFromHeader(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		name, header, value string
		wantTrace, wantSpan string
	}{
		{"cloud trace", "X-Cloud-Trace-Context", id + "/123;o=1", id, "123"},
		{"traceparent", "Traceparent", "00-" + id + "-00f067aa0ba902b7-01", id, "00f067aa0ba902b7"},
		{"garbled cloud trace", "X-Cloud-Trace-Context", "nope/1", "", ""},
		{"zero traceparent", "Traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", ""},
		{"none", "X-Other", "x", "", ""},
	}
	for _, tc := range tests {
		h := http.Header{}
		h.Set(tc.header, tc.value)
		trace, span := TraceFromHeader(h)
		if trace != tc.wantTrace || span != tc.wantSpan {
			t.Errorf("%s: TraceFromHeader(%s: %s) = %q, %q, want %q, %q", tc.name, tc.header, tc.value, trace, span, tc.wantTrace, tc.wantSpan)
		}
	}
}

func TestMiddlewareAddsTraceToEntries(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, WithProject("p1"))
	h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.InfoContext(r.Context(), "handled")
	}))
	req := httptest.NewRequest(http.MethodPost, "/Replay", nil)
	req.Header.Set("X-Cloud-Trace-Context", "4bf92f3577b34da6a3ce929d0e0e4736/7;o=1")
	h.ServeHTTP(httptest.NewRecorder(), req)
	m := decode(t, buf.Bytes())
	if got, want := m[KeyTrace], "projects/p1/traces/4bf92f3577b34da6a3ce929d0e0e4736"; got != want {
		t.Errorf("%s = %v, want %q", KeyTrace, got, want)
	}
	if m[KeySpanID] != "7" {
		t.Errorf("%s = %v, want 7", KeySpanID, m[KeySpanID])
	}
	// Without a trace in the context no trace key is written.
	buf.Reset()
	log.InfoContext(context.Background(), "plain")
	if _, ok := decode(t, buf.Bytes())[KeyTrace]; ok {
		t.Errorf("entry without a request has a trace key")
	}
}

func TestListenServesThroughMiddlewareUntilShutdown(t *testing.T) {
	srv, err := Listen("127.0.0.1", 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, _ := r.Context().Value(traceKey{}).(traceInfo)
		w.Write([]byte("trace=" + t.traceID))
	}), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.Addr()+"/", nil)
	req.Header.Set("X-Cloud-Trace-Context", "0123456789abcdef0123456789abcdef/1;o=1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := string(body), "trace=0123456789abcdef0123456789abcdef"; got != want {
		t.Errorf("GET / = %q, want %q", got, want)
	}
	if err := srv.Shutdown(time.Second); err != nil {
		t.Fatalf("Shutdown = %v, want nil", err)
	}
	if err := <-srv.Failed(); err != nil {
		t.Errorf("Failed() after Shutdown = %v, want nil (a shutdown is not a failure)", err)
	}
	if _, err := Listen("127.0.0.1", -1, http.NotFoundHandler(), Limits{}); err == nil {
		t.Error("Listen(port -1) = nil error, want one naming the port")
	}
}

// Every string and error a log line carries is written as a reader sees
// it: a value that bypassed event.Wire (a stream name inside a NATS error,
// a subject) cannot reverse, hide or break the text around it, nested in a
// group or not; visible text, and a value event.Wire already escaped, are
// written as they are.
func TestLoggerEscapesInvisibleValues(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{"WORK\u202eUE", `WORK\u202eUE`},
		{"a\u200bb", `a\u200bb`},
		{"line\nforged", `line\nforged`},
		{"esc\x1b[2J", `esc\x1b[2J`},
		{"bad\xffutf8", `bad\xffutf8`},
		{errors.New("stream \u202eKSAT not found"), `stream \u202eKSAT not found`},
		{`already \u202e escaped`, `already \u202e escaped`},
		{"plain text, ünïcode ✓", "plain text, ünïcode ✓"},
		{event.Wire("t\u202e"), `t\u202e`},
	}
	for _, tc := range tests {
		var buf bytes.Buffer
		NewLogger(&buf).Info("m", "v", tc.in, slog.Group("g", "v", tc.in))
		m := decode(t, buf.Bytes())
		if m["v"] != tc.want {
			t.Errorf("Info(v=%q) logged v = %q, want %q", tc.in, m["v"], tc.want)
		}
		if g, _ := m["g"].(map[string]any); g["v"] != tc.want {
			t.Errorf("Info(g.v=%q) logged g.v = %q, want %q", tc.in, g["v"], tc.want)
		}
	}
}
