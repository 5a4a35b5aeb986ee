package testenv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/api/iterator"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/shared/clientopt"
)

// CloudTasks is an in-process Cloud Tasks emulator of a test's own, laid out
// as the binary lays itself out: gRPC on Host, the JWKS on the next port.
type CloudTasks struct {
	Host    string // gRPC host:port; what CLOUD_TASKS_EMULATOR_HOST holds
	JWKSURL string
	Client  *ctapi.Client // official client, closed when the test ends
	Server  *cloudtasks.Server

	stop func()
}

// NewCloudTasks starts a Cloud Tasks emulator for this test; it is stopped
// when the test ends, or earlier by Stop.
func NewCloudTasks(t testing.TB, opts ...cloudtasks.Option) *CloudTasks {
	t.Helper()
	srv, err := cloudtasks.New(opts...)
	if err != nil {
		t.Fatalf("testenv: cloud tasks emulator: %v", err)
	}
	gl, hl, err := adjacentListeners()
	if err != nil {
		t.Fatalf("testenv: cloud tasks emulator: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl) }()
	host := gl.Addr().String()
	client, err := ctapi.NewClient(context.Background(), clientopt.CloudTasksOptions(host)...)
	if err != nil {
		cancel()
		t.Fatalf("testenv: cloud tasks client: %v", err)
	}
	jwks, _ := clientopt.CloudTasksJWKSURL(host)
	c := &CloudTasks{Host: host, JWKSURL: jwks, Client: client, Server: srv}
	var once sync.Once
	c.stop = func() {
		once.Do(func() {
			client.Close()
			cancel()
			if err := Await(t, done, 20*time.Second, "the cloud tasks emulator to stop"); err != nil {
				t.Errorf("testenv: cloud tasks emulator Serve() = %v", err)
			}
		})
	}
	t.Cleanup(c.stop)
	return c
}

// Stop stops the emulator and closes its client before the test ends: a
// restart test stops one and starts another on the same data directory.
// Stopping again, or at the end of the test, does nothing.
func (c *CloudTasks) Stop() { c.stop() }

// adjacentListeners listens on a free loopback port and the one after it.
func adjacentListeners() (net.Listener, net.Listener, error) {
	for i := 0; i < 50; i++ {
		gl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		port := gl.Addr().(*net.TCPAddr).Port
		hl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
		if err == nil {
			return gl, hl, nil
		}
		gl.Close()
	}
	return nil, nil, fmt.Errorf("no two adjacent free ports on 127.0.0.1")
}

// Queue creates a queue with the emulator's defaults (fast retries for
// tests) and returns its full name.
func (c *CloudTasks) Queue(t testing.TB, project, id string) string {
	t.Helper()
	parent := fmt.Sprintf("projects/%s/locations/us-central1", project)
	q, err := c.Client.CreateQueue(context.Background(), &cloudtaskspb.CreateQueueRequest{
		Parent: parent, Queue: &cloudtaskspb.Queue{Name: parent + "/queues/" + id},
	})
	if err != nil {
		t.Fatalf("testenv: create queue %s: %v", id, err)
	}
	return q.GetName()
}

// Tasks lists the full names of the tasks in a queue.
func (c *CloudTasks) Tasks(t testing.TB, queue string) []string {
	t.Helper()
	var names []string
	it := c.Client.ListTasks(context.Background(), &cloudtaskspb.ListTasksRequest{Parent: queue})
	for {
		task, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatalf("testenv: list tasks of %s: %v", queue, err)
		}
		names = append(names, task.GetName())
	}
	return names
}

// WaitDrained waits until queue holds no task: each has been dispatched
// and answered.
func (c *CloudTasks) WaitDrained(t testing.TB, queue string) {
	t.Helper()
	WaitFor(t, 30*time.Second, func() error {
		if left := c.Tasks(t, queue); len(left) > 0 {
			return fmt.Errorf("tasks still queued: %v", left)
		}
		return nil
	})
}

// TaskTarget is an HTTP target for Cloud Tasks that answers every delivery
// with 200 and counts them by task name: for tests of what gets dispatched,
// not of what the replay function makes of it.
type TaskTarget struct {
	URL string

	mu sync.Mutex
	n  map[string]int
}

// NewTaskTarget starts a TaskTarget, stopped when the test ends.
func NewTaskTarget(t testing.TB) *TaskTarget {
	tg := &TaskTarget{n: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		tg.n[r.Header.Get(cloudtasks.HeaderTaskName)]++
	}))
	t.Cleanup(srv.Close)
	tg.URL = srv.URL
	return tg
}

// Deliveries returns how often each task has been delivered so far.
func (tg *TaskTarget) Deliveries() map[string]int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return maps.Clone(tg.n)
}
