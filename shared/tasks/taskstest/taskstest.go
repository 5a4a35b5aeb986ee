// Package taskstest runs the project's Cloud Tasks emulator in-process for
// tests of code that schedules replays: real gRPC on a loopback port, driven
// by the official client, stopped when the test ends.
package taskstest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"google.golang.org/api/iterator"
)

// Location is where test queues are created.
const Location = "projects/test-project/locations/us-central1"

// Emulator is a running Cloud Tasks emulator.
type Emulator struct {
	Addr    string // gRPC host:port, the CLOUD_TASKS_EMULATOR_HOST value
	JWKSURL string // where the OIDC keys of dispatched tasks are published
	Client  *ctapi.Client
}

// Start serves an emulator on free loopback ports until the test ends.
func Start(t testing.TB, opts ...cloudtasks.Option) *Emulator {
	t.Helper()
	srv, err := cloudtasks.New(opts...)
	if err != nil {
		t.Fatalf("taskstest: emulator: %v", err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gl.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl) }()
	e := &Emulator{Addr: gl.Addr().String(), JWKSURL: "http://" + hl.Addr().String() + cloudtasks.JWKSPath}
	c, err := ctapi.NewClient(context.Background(), cloudtasks.ClientOptions(e.Addr)...)
	if err != nil {
		cancel()
		t.Fatalf("taskstest: client: %v", err)
	}
	e.Client = c
	t.Cleanup(func() {
		c.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("taskstest: Serve() = %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("taskstest: emulator did not stop")
		}
	})
	return e
}

// Queue creates a queue and returns its full name.
func (e *Emulator) Queue(t testing.TB, id string) string {
	t.Helper()
	q, err := e.Client.CreateQueue(context.Background(), &cloudtaskspb.CreateQueueRequest{
		Parent: Location,
		Queue:  &cloudtaskspb.Queue{Name: Location + "/queues/" + id},
	})
	if err != nil {
		t.Fatalf("taskstest: CreateQueue(%s) = %v", id, err)
	}
	return q.Name
}

// Tasks lists the full names of the tasks in a queue.
func (e *Emulator) Tasks(t testing.TB, queue string) []string {
	t.Helper()
	var names []string
	it := e.Client.ListTasks(context.Background(), &cloudtaskspb.ListTasksRequest{Parent: queue})
	for {
		task, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatalf("taskstest: ListTasks(%s) = %v", queue, err)
		}
		names = append(names, task.GetName())
	}
	return names
}
