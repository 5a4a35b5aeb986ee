package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/jsdlq/jsdlq/shared/tasksemu"
)

// TestExternalEmulator drives an emulator started separately, e.g.
//
//	go run ./cmd/cloudtasks-emulator --host-port=127.0.0.1:8123 --data-dir /tmp/x &
//	CLOUD_TASKS_EMULATOR_HOST=127.0.0.1:8123 go test ./cmd/cloudtasks-emulator -run External -v
//
// It is skipped when CLOUD_TASKS_EMULATOR_HOST is unset.
func TestExternalEmulator(t *testing.T) {
	opts := tasksemu.ClientOptions(os.Getenv(tasksemu.EnvHost)) // nil when unset
	if opts == nil {
		t.Skip(tasksemu.EnvHost + " not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan *http.Request, 1)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r:
		default:
		}
	}))
	defer tg.Close()
	client, err := ctapi.NewClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	id := fmt.Sprintf("smoke-%d", time.Now().UnixNano())
	q, err := client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{
		Parent: "projects/smoke/locations/local",
		Queue:  &cloudtaskspb.Queue{Name: "projects/smoke/locations/local/queues/" + id},
	})
	if err != nil {
		t.Fatalf("CreateQueue() = %v", err)
	}
	defer client.DeleteQueue(context.Background(), &cloudtaskspb.DeleteQueueRequest{Name: q.Name})
	task, err := client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q.Name, Task: &cloudtaskspb.Task{
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url:                 tg.URL + "/Replay",
			AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{ServiceAccountEmail: "sa@smoke.iam.gserviceaccount.com"}},
		}},
	}})
	if err != nil {
		t.Fatalf("CreateTask() = %v", err)
	}
	t.Logf("created %s in %s", task.Name, q.Name)
	jwks, err := tasksemu.JWKSURL(os.Getenv(tasksemu.EnvHost))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		raw := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		claims, err := tasksemu.NewVerifier(jwks).Verify(ctx, raw, tg.URL+"/Replay")
		if err != nil {
			t.Fatalf("Verify() against %s = %v", jwks, err)
		}
		t.Logf("dispatched %s %s with token for %s, verified against %s", r.Method, r.URL.Path, claims.Email, jwks)
	case <-ctx.Done():
		t.Fatal("task not dispatched")
	}
}
