package cloudtasks_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/internal/testenv"
)

const testLocation = "projects/test-project/locations/us-central1"

// emu is one emulator of the test's own (testenv.CloudTasks) with the
// calls these tests make through its official client.
type emu struct{ *testenv.CloudTasks }

func startEmu(t testing.TB, opts ...cloudtasks.Option) *emu {
	t.Helper()
	return &emu{testenv.NewCloudTasks(t, opts...)}
}

// queue creates a queue with the given limits; nil keeps the defaults.
func (e *emu) queue(t testing.TB, id string, rl *cloudtaskspb.RateLimits, rc *cloudtaskspb.RetryConfig) string {
	t.Helper()
	q, err := e.Client.CreateQueue(context.Background(), &cloudtaskspb.CreateQueueRequest{
		Parent: testLocation,
		Queue:  &cloudtaskspb.Queue{Name: testLocation + "/queues/" + id, RateLimits: rl, RetryConfig: rc},
	})
	if err != nil {
		t.Fatalf("CreateQueue(%s) = %v", id, err)
	}
	return q.Name
}

// pause pauses queue q: tasks created meanwhile wait, even once due.
func (e *emu) pause(t testing.TB, q string) {
	t.Helper()
	if _, err := e.Client.PauseQueue(context.Background(), &cloudtaskspb.PauseQueueRequest{Name: q}); err != nil {
		t.Fatalf("PauseQueue(%s) = %v", q, err)
	}
}

func (e *emu) resume(t testing.TB, q string) {
	t.Helper()
	if _, err := e.Client.ResumeQueue(context.Background(), &cloudtaskspb.ResumeQueueRequest{Name: q}); err != nil {
		t.Fatalf("ResumeQueue(%s) = %v", q, err)
	}
}

func (e *emu) task(t testing.TB, queue string, task *cloudtaskspb.Task) *cloudtaskspb.Task {
	t.Helper()
	got, err := e.Client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	if err != nil {
		t.Fatalf("CreateTask(%s) = %v", task.GetName(), err)
	}
	return got
}

// waitDeleted waits until task name is gone: answered with success, or
// given up after its last retry.
func (e *emu) waitDeleted(t testing.TB, name, what string) {
	t.Helper()
	testenv.WaitUntil(t, 20*time.Second, what, func() bool {
		_, err := e.Client.GetTask(context.Background(), &cloudtaskspb.GetTaskRequest{Name: name})
		return codeOf(err) == codes.NotFound
	})
}

func httpTask(name, url string) *cloudtaskspb.Task {
	return &cloudtaskspb.Task{
		Name: name,
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: url, HttpMethod: cloudtaskspb.HttpMethod_POST, Body: []byte("payload"),
		}},
	}
}

type hit struct {
	at     time.Time
	method string
	path   string
	header http.Header
	body   []byte
}

// target is the HTTP endpoint tasks are dispatched to. respond picks the
// status of the n-th hit (0-based); nil answers 200.
type target struct {
	*httptest.Server
	mu      sync.Mutex
	hits    []hit
	respond func(n int, h hit) int
}

func newTarget(t testing.TB, respond func(n int, h hit) int) *target {
	tg := &target{respond: respond}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := hit{at: time.Now(), method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body}
		tg.mu.Lock()
		n := len(tg.hits)
		tg.hits = append(tg.hits, h)
		tg.mu.Unlock()
		code := http.StatusOK
		if tg.respond != nil {
			code = tg.respond(n, h)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) snapshot() []hit {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]hit(nil), tg.hits...)
}

func (tg *target) count() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return len(tg.hits)
}

// drain collects everything an iterator of the official client yields,
// paging as the client does.
func drain[T any](t testing.TB, what string, it interface{ Next() (T, error) }) []T {
	t.Helper()
	var out []T
	for {
		v, err := it.Next()
		if err == iterator.Done {
			return out
		}
		if err != nil {
			t.Fatalf("%s iterator = %v", what, err)
		}
		out = append(out, v)
	}
}

func queueNames(qs []*cloudtaskspb.Queue) []string {
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	return names
}

func codeOf(err error) codes.Code { return status.Code(err) }

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
