package main_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/jsdlq/jsdlq/emulator/stack"
	"github.com/jsdlq/jsdlq/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// startHost builds and starts the real functions host on a free port and
// returns its base URL and log file.
func startHost(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "functions")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr, err := stack.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	logFile := filepath.Join(dir, "functions.log")
	p, err := stack.Start(testenv.Context(t), stack.Spec{
		Name: "functions", Path: bin, Addr: addr, LogFile: logFile, Watch: true,
		Env: []string{"PORT=" + port, "FUNCTION_TARGET=Replay", "GOOGLE_CLOUD_PROJECT=jsdlq-test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return "http://" + addr, logFile
}

func TestServesAllThreeFunctionsDespiteFunctionTarget(t *testing.T) {
	base, _ := startHost(t)
	tests := []struct {
		path string
		want int
	}{
		{"/Replay", http.StatusNotImplemented},
		{"/Reconcile", http.StatusNotImplemented},
		{"/Nope", http.StatusNotFound},
	}
	for _, tc := range tests {
		resp, err := http.Post(base+tc.path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatalf("POST %s: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("POST %s = %d %q, want %d", tc.path, resp.StatusCode, body, tc.want)
		}
		if tc.want == http.StatusNotImplemented && !strings.Contains(string(body), "not implemented yet") {
			t.Errorf("POST %s body = %q, want it to say not implemented yet", tc.path, body)
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
	if resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("POST /Classify = %d, want 501 from the classify stub", resp.StatusCode)
	}
	line := waitForLog(t, logFile, "push-msg-42")
	if !strings.Contains(line, `"event_type":"google.cloud.pubsub.topic.v1.messagePublished"`) {
		t.Errorf("classify log = %s, want a Pub/Sub CloudEvent type", line)
	}
}

// The real Pub/Sub emulator pushing to the host proves the whole local wiring.
func TestEmulatorPushSubscriptionReachesClassify(t *testing.T) {
	ps, project := testenv.PubSub(t)
	base, logFile := startHost(t)
	ctx := testenv.Context(t)
	topic := fmt.Sprintf("projects/%s/topics/dlq-events", project)
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: fmt.Sprintf("projects/%s/subscriptions/classify-push", project), Topic: topic,
		PushConfig: &pubsubpb.PushConfig{PushEndpoint: base + "/Classify"},
	}); err != nil {
		t.Fatal(err)
	}
	pub := ps.Publisher(topic)
	defer pub.Stop()
	id, err := pub.Publish(ctx, &pubsub.Message{Data: []byte(`{"schema":"jsdlq.event.v1"}`)}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	line := waitForLog(t, logFile, `"event_id":"`+id+`"`)
	if !strings.Contains(line, "google.cloud.pubsub.topic.v1.messagePublished") {
		t.Errorf("classify log = %s, want a Pub/Sub CloudEvent", line)
	}
}

func waitForLog(t *testing.T, file, needle string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, needle) {
				return line
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(file)
	t.Fatalf("no log line with %s in %s:\n%s", needle, file, b)
	return ""
}
