package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/auth/keyset"
	"github.com/jsdlq/jsdlq/shared/clientopt"
)

// The binary's run: it logs the readiness line, the official client creates
// a queue and a task through ClientOptions, the task reaches its target with
// an OIDC token the advertised JWKS verifies, and a cancel stops it cleanly.
func TestRunServesOfficialClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.LogBuffer{}
	ready := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--host-port=127.0.0.1:0", "--jwks-host-port=127.0.0.1:0", "--data-dir", t.TempDir()}, out, ready)
	}()
	var addrs [2]string
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("run() = %v before ready", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no readiness")
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &line); err != nil {
		t.Fatalf("first log line %q: %v", out.String(), err)
	}
	if line["message"] != "listening" || line["grpc"] != addrs[0] || line["jwks_url"] != "http://"+addrs[1]+clientopt.CloudTasksJWKSPath {
		t.Errorf("readiness line = %v, want message listening with grpc %s and jwks_url", line, addrs[0])
	}

	client, err := ctapi.NewClient(ctx, clientopt.CloudTasksOptions(addrs[0])...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	dispatchCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	dispatchVerified(t, dispatchCtx, client, "projects/p/locations/l", "replay", "sa@p.iam.gserviceaccount.com", "http://"+addrs[1]+clientopt.CloudTasksJWKSPath)
	resp, err := http.Get("http://" + addrs[1] + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = %v, %v; want 200", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	cancel()
	if err := testenv.Await(t, done, 20*time.Second, "run to stop"); err != nil {
		t.Errorf("run() after cancel = %v, want nil", err)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--host-port=nonsense"}, {"extra-arg"}, {"--no-such-flag"}} {
		if err := run(context.Background(), args, &testenv.LogBuffer{}, nil); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

// dispatchVerified creates queue id under parent and in it a task with an
// OIDC token for account to a target of the test's own, waits (while ctx
// lasts) for the dispatch and verifies its token against jwks: the round
// trip a replay makes.
func dispatchVerified(t *testing.T, ctx context.Context, client *ctapi.Client, parent, id, account, jwks string) {
	t.Helper()
	got := make(chan *http.Request, 1)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r:
		default:
		}
	}))
	defer tg.Close()
	q, err := client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{
		Parent: parent,
		Queue:  &cloudtaskspb.Queue{Name: parent + "/queues/" + id},
	})
	if err != nil {
		t.Fatalf("CreateQueue() = %v", err)
	}
	task, err := client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q.Name, Task: &cloudtaskspb.Task{
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url:                 tg.URL + "/Replay",
			AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{ServiceAccountEmail: account}},
		}},
	}})
	if err != nil {
		t.Fatalf("CreateTask() = %v", err)
	}
	t.Logf("created %s in %s", task.Name, q.Name)
	select {
	case r := <-got:
		raw := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		claims, err := keyset.NewVerifier(jwks).Verify(ctx, raw, tg.URL+"/Replay")
		if err != nil {
			t.Fatalf("Verify(dispatched token) against %s = %v", jwks, err)
		}
		t.Logf("dispatched %s %s with token for %s, verified against %s", r.Method, r.URL.Path, claims.Email, jwks)
	case <-ctx.Done():
		t.Fatal("task not dispatched")
	}
}
