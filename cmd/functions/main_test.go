package main_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// startHost builds and starts the real functions host on a free port and
// returns its base URL and log file.
func startHost(t *testing.T) (string, string) {
	t.Helper()
	addr, logFile := testenv.FunctionsHost(t,
		"FUNCTION_TARGET=Replay", "GOOGLE_CLOUD_PROJECT=jsdlq-test",
		"FIRESTORE_EMULATOR_HOST="+testenv.FirestoreHost(t),
		"CLOUD_TASKS_EMULATOR_HOST=127.0.0.1:1", // never reached: the events here are malformed
		"TASKS_QUEUE=projects/jsdlq-test/locations/us-central1/queues/dlq-replay",
		"REPLAY_URL=http://127.0.0.1:1/Replay",
		"TASKS_SERVICE_ACCOUNT=tasks@jsdlq-test.iam.gserviceaccount.com",
		// Replay and Reconcile refuse the token-less requests here at
		// once, before doing any work.
		"AUTH_MODE=emulator", "AUTH_AUDIENCE=http://127.0.0.1:1/Replay", "AUTH_ALLOWED_EMAILS=tasks@jsdlq-test.iam.gserviceaccount.com",
	)
	return "http://" + addr, logFile
}

func TestServesAllThreeFunctionsDespiteFunctionTarget(t *testing.T) {
	base, _ := startHost(t)
	for _, path := range []string{"/Classify", "/Replay", "/Reconcile", "/Nope"} {
		resp, err := http.Post(base+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		// Whatever each function answers to an empty body (400 from the
		// framework for /Classify, 401 for the others), only an unknown path
		// may be unrouted.
		if got, unknown := resp.StatusCode == http.StatusNotFound, path == "/Nope"; got != unknown {
			t.Errorf("POST %s = %d, want 404 only for the unknown path", path, resp.StatusCode)
		}
	}
}

// The emulator pushes this JSON envelope (not a CloudEvent); the functions
// framework must turn it into a Pub/Sub CloudEvent for Classify.
func TestPushEnvelopeReachesClassifyAsCloudEvent(t *testing.T) {
	base, logFile := startHost(t)
	push := map[string]any{
		"message": map[string]any{
			"data":        base64.StdEncoding.EncodeToString([]byte(`{"schema":"jsdlq.event.v1"}`)),
			"attributes":  map[string]string{"kind": "max_deliver"},
			"messageId":   "push-msg-42",
			"publishTime": "2026-11-21T10:00:00.000Z",
		},
		"subscription": "projects/jsdlq-test/subscriptions/classify-push",
	}
	body, _ := json.Marshal(push)
	resp, err := http.Post(base+"/Classify", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The body is no valid jsdlq event: classify acknowledges it (2xx, so
	// Pub/Sub does not redeliver it forever) and says why in one log line
	// naming the CloudEvent the framework built from the push envelope.
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST /Classify = %d, want 2xx for an acknowledged malformed event", resp.StatusCode)
	}
	line := waitForLog(t, logFile, `"cloudevent_id":"push-msg-42"`)
	if !strings.Contains(line, `"cloudevent_type":"google.cloud.pubsub.topic.v1.messagePublished"`) || !strings.Contains(line, `"severity":"WARNING"`) {
		t.Errorf("classify log = %s, want a WARNING naming a Pub/Sub CloudEvent", line)
	}
}

func waitForLog(t *testing.T, file, needle string) string {
	t.Helper()
	var found string
	testenv.WaitFor(t, 60*time.Second, func() error {
		b, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, needle) {
				found = line
				return nil
			}
		}
		return fmt.Errorf("no log line with %s in %s:\n%s", needle, file, b)
	})
	return found
}

// The local push subscription delivers to /Classify/<topic>: the host hands
// classify the CloudEvent Eventarc would (source = the topic), and the
// functions framework, converting nothing, prints no plain-text warning
// about a topic it cannot find into the JSON log. A body that is no push
// envelope is refused with 400 (a redelivery cannot fix it) and reaches no
// function.
func TestTopicPushPathReachesClassifyWithoutWarning(t *testing.T) {
	base, logFile := startHost(t)
	push := map[string]any{
		"message": map[string]any{
			"data":        base64.StdEncoding.EncodeToString([]byte(`{"schema":"jsdlq.event.v1"}`)),
			"messageId":   "push-msg-43",
			"publishTime": "2026-11-21T10:00:00.000Z",
		},
		"subscription": "projects/jsdlq-test/subscriptions/classify-push",
	}
	body, _ := json.Marshal(push)
	tests := []struct {
		path, body string
		want       int
	}{
		{"/Classify/projects/jsdlq-test/topics/dlq-events", string(body), http.StatusOK},
		{"/Classify/projects/jsdlq-test/topics/dlq-events", `{"not":"a push"}`, http.StatusBadRequest},
		{"/Classify/projects/jsdlq-test/topics/dlq-events", `not json`, http.StatusBadRequest},
		{"/Classify/projects/jsdlq-test", string(body), http.StatusNotFound},
		// Refused, and logged with its path escaped (event.Wire).
		{"/Classify/projects/jsdlq-test/topics/dlq%1B%5B2J%E2%80%AEevents", `not json`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		resp, err := http.Post(base+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatalf("POST %s: %v", tt.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("POST %s %.20q = %d, want %d", tt.path, tt.body, resp.StatusCode, tt.want)
		}
	}
	line := waitForLog(t, logFile, `"cloudevent_id":"push-msg-43"`)
	if !strings.Contains(line, `"source":"//pubsub.googleapis.com/projects/jsdlq-test/topics/dlq-events"`) {
		t.Errorf("classify log = %s, want the topic as the CloudEvent's source", line)
	}
	b, _ := os.ReadFile(logFile)
	if strings.Contains(string(b), "failed to extract Pub/Sub topic name") {
		t.Errorf("host log has the framework's topic warning:\n%s", b)
	}
	refused := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "push refused") {
			refused++
			testenv.CheckVisibleLogLine(t, "push refusal", line)
		}
	}
	if refused != 3 {
		t.Errorf("host log has %d push refusals, want 3:\n%s", refused, b)
	}
}

// The framework's own server has no timeouts; the host's front has them.
// A client that never finishes its headers (slow loris) is cut off.
func TestSlowClientIsCutOffAtTheFront(t *testing.T) {
	base, _ := startHost(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /Replay HTTP/1.1\r\nHost: x\r\nX-Slow: ")); err != nil {
		t.Fatal(err)
	}
	// An upper bound for a loaded machine, not a measured time: the front
	// closes after obs.DefaultReadHeaderTimeout.
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the functions host kept a connection whose headers never ended")
	}
}

// A function past FUNCTIONS_REQUEST_TIMEOUT is cut off with a 503 (so
// Pub/Sub or Cloud Tasks retry it later) instead of holding the request:
// here classify waits on a Firestore that accepts connections and never
// answers.
func TestFunctionPastItsDeadlineIsCutOff(t *testing.T) {
	addr, _ := testenv.FunctionsHost(t, "GOOGLE_CLOUD_PROJECT=jsdlq-test", "FIRESTORE_EMULATOR_HOST="+testenv.BlackHole(t),
		"FUNCTIONS_REQUEST_TIMEOUT=2s", "CLOUD_TASKS_EMULATOR_HOST=127.0.0.1:1",
		"TASKS_QUEUE=projects/jsdlq-test/locations/us-central1/queues/dlq-replay", "REPLAY_URL=http://127.0.0.1:1/Replay",
		"TASKS_SERVICE_ACCOUNT=tasks@jsdlq-test.iam.gserviceaccount.com")
	ev := event.Event{Schema: event.Schema, ID: event.ID("TASKS", 7), Kind: event.KindMaxDeliver, Stream: "TASKS", StreamSeq: 7,
		Tenant: "acme", ObservedAt: time.Now().UTC(),
		Advisory: &event.Advisory{Type: event.AdvisoryMaxDeliver, Stream: "TASKS", StreamSeq: 7, Consumer: "w", Deliveries: 3}}
	ev.Message.Subject = "agents.a.tasks.t"
	ev.Message.SetPayload([]byte("{}"))
	data, err := event.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	push, _ := json.Marshal(map[string]any{
		"message":      map[string]any{"data": base64.StdEncoding.EncodeToString(data), "messageId": "push-slow", "publishTime": "2026-11-21T10:00:00.000Z"},
		"subscription": "projects/jsdlq-test/subscriptions/classify-push",
	})
	resp, err := http.Post("http://"+addr+"/Classify/projects/jsdlq-test/topics/dlq-events", "application/json", bytes.NewReader(push))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("POST a push while Firestore never answers = %d %q, want 503 at the request deadline", resp.StatusCode, body)
	}
}
