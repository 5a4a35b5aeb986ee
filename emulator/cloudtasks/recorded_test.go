package cloudtasks_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// TestRecordedAnswers replays, through the official client, every call
// whose answer was recorded from the real Cloud Tasks v2 API, and wants the
// same code, the same message word for word, and the Help detail where the
// service sent one. (The dispatch headers of the recorded 503, 404, 200
// sequence are TestDispatchHeadersAndBookkeeping's.)
func TestRecordedAnswers(t *testing.T) {
	t.Parallel()
	e := startEmu(t) // the default tombstone window, as the real service
	ctx := context.Background()
	c := e.Client
	q := e.queue(t, "recorded", nil, nil)
	missingQ := testLocation + "/queues/never-created"
	later := func(tk *cloudtaskspb.Task) *cloudtaskspb.Task {
		tk.ScheduleTime = timestamppb.New(time.Now().Add(time.Hour)) // never dispatched during the test
		return tk
	}
	task := func(name, url string) *cloudtaskspb.Task { return later(httpTask(name, url)) }
	const good = "http://127.0.0.1:1/replay"

	deletedQ := e.queue(t, "deleted-moments-ago", nil, nil)
	if err := c.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: deletedQ}); err != nil {
		t.Fatalf("DeleteQueue() = %v", err)
	}
	existing := e.task(t, q, task(q+"/tasks/existing", good))
	gone := e.task(t, q, task(q+"/tasks/gone", good))
	if err := c.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: gone.Name}); err != nil {
		t.Fatalf("DeleteTask() = %v", err)
	}
	newQueue := func(id string, rl *cloudtaskspb.RateLimits, rc *cloudtaskspb.RetryConfig) error {
		_, err := c.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: testLocation, Queue: &cloudtaskspb.Queue{
			Name: testLocation + "/queues/" + id, RateLimits: rl, RetryConfig: rc,
		}})
		return err
	}
	createTask := func(parent string, tk *cloudtaskspb.Task) error {
		_, err := c.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: parent, Task: tk})
		return err
	}

	const (
		queueMissing = "Queue does not exist. If you just created the queue, wait at least a minute for the queue to initialize."
		notFound     = "Requested entity was not found."
		scheme       = "HttpTarget.url must start with 'http://' or 'https://'."
	)
	tests := []struct {
		name     string
		call     func() error
		want     codes.Code
		wantMsg  string
		wantHelp bool
	}{
		// A queue deleted moments ago.
		{"CreateQueue(deleted moments ago)", func() error { return newQueue("deleted-moments-ago", nil, nil) }, codes.FailedPrecondition,
			"The queue cannot be created because a queue with this name existed too recently.", false},
		{"GetQueue(deleted moments ago)", func() error { _, err := c.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: deletedQ}); return err }, codes.NotFound, queueMissing, false},
		{"CreateTask(queue deleted moments ago)", func() error { return createTask(deletedQ, task("", good)) }, codes.NotFound, queueMissing, false},

		// Accepted although one might expect a refusal.
		{"CreateQueue(max_burst_size -1)", func() error { return newQueue("burst", &cloudtaskspb.RateLimits{MaxBurstSize: -1}, nil) }, codes.OK, "", false},
		{"CreateTask(url http://example.com/%zz)", func() error { return createTask(q, task("", "http://example.com/%zz")) }, codes.OK, "", false},

		// Missing entities.
		{"GetQueue(missing)", func() error { _, err := c.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: missingQ}); return err }, codes.NotFound, queueMissing, false},
		{"PauseQueue(missing)", func() error { _, err := c.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: missingQ}); return err }, codes.NotFound, queueMissing, false},
		{"ResumeQueue(missing)", func() error {
			_, err := c.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{Name: missingQ})
			return err
		}, codes.NotFound, queueMissing, false},
		{"PurgeQueue(missing)", func() error { _, err := c.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{Name: missingQ}); return err }, codes.NotFound, queueMissing, false},
		{"CreateTask(missing queue)", func() error { return createTask(missingQ, task("", good)) }, codes.NotFound, queueMissing, false},
		{"DeleteQueue(missing)", func() error { return c.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: missingQ}) }, codes.NotFound, notFound, false},
		{"GetTask(missing)", func() error {
			_, err := c.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: q + "/tasks/missing"})
			return err
		}, codes.NotFound, notFound, false},
		{"DeleteTask(missing)", func() error { return c.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: q + "/tasks/missing"}) }, codes.NotFound, notFound, false},
		{"RunTask(missing)", func() error {
			_, err := c.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: q + "/tasks/missing"})
			return err
		}, codes.NotFound, notFound, false},
		{"GetTask(deleted moments ago)", func() error { _, err := c.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: gone.Name}); return err }, codes.NotFound,
			"The task no longer exists, though a task with this name existed recently. The task either successfully completed or was deleted.", false},

		// Duplicates.
		{"CreateQueue(duplicate)", func() error { return newQueue("recorded", nil, nil) }, codes.AlreadyExists, "Queue already exists", false},
		{"CreateTask(duplicate)", func() error { return createTask(q, task(existing.Name, good)) }, codes.AlreadyExists, "Requested entity already exists", false},

		// Names.
		{"CreateQueue(bad name)", func() error { return newQueue("bad_name", nil, nil) }, codes.InvalidArgument,
			`Queue name must be formatted: "projects/<PROJECT_ID>/locations/<LOCATION_ID>/queues/<QUEUE_ID>".`, true},
		{"CreateTask(task id 'not a valid id')", func() error { return createTask(q, task(q+"/tasks/not a valid id", good)) }, codes.InvalidArgument,
			`Task ID "not a valid id" can contain only letters ([A-Za-z]), numbers ([0-9]), hyphens (-), or underscores (_). Task ID must between 1 and 500 characters.`, true},
		{"CreateTask(task of another queue)", func() error { return createTask(q, task(testLocation+"/queues/other/tasks/t1", good)) }, codes.InvalidArgument,
			"The queue name from request ('" + q + "') must be the same as the queue name in the named task ('" + testLocation + "/queues/other').", false},

		// URLs.
		{"CreateTask(empty url)", func() error { return createTask(q, task("", "")) }, codes.InvalidArgument, "HttpRequest.url is required.", false},
		{"CreateTask(url without scheme)", func() error { return createTask(q, task("", "example.com/replay")) }, codes.InvalidArgument, scheme, false},
		{"CreateTask(ftp url)", func() error { return createTask(q, task("", "ftp://example.com/replay")) }, codes.InvalidArgument, scheme, false},

		// Rate limits and retry config.
		{"CreateQueue(rate -1)", func() error { return newQueue("r1", &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: -1}, nil) }, codes.InvalidArgument,
			"RateLimits.maxDispatchesPerSecond cannot be negative.", false},
		{"CreateQueue(rate 501)", func() error { return newQueue("r2", &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 501}, nil) }, codes.InvalidArgument,
			"RateLimits.maxDispatchesPerSecond must be less than or equal to 500.", false},
		{"CreateQueue(concurrency -1)", func() error { return newQueue("r3", &cloudtaskspb.RateLimits{MaxConcurrentDispatches: -1}, nil) }, codes.InvalidArgument,
			"RateLimits.maxConcurrentDispatches cannot be negative.", false},
		{"CreateQueue(concurrency 5001)", func() error { return newQueue("r4", &cloudtaskspb.RateLimits{MaxConcurrentDispatches: 5001}, nil) }, codes.InvalidArgument,
			"RateLimits.maxConcurrentDispatches must be less than or equal to 5000.", false},
		{"CreateQueue(max_attempts -2)", func() error { return newQueue("r5", nil, &cloudtaskspb.RetryConfig{MaxAttempts: -2}) }, codes.InvalidArgument,
			"RetryConfig.maxAttempts must be greater or equal to -1.", false},
		{"CreateQueue(max_doublings -1)", func() error { return newQueue("r6", nil, &cloudtaskspb.RetryConfig{MaxDoublings: -1}) }, codes.InvalidArgument,
			"RetryConfig.maxDoublings cannot be negative.", false},
		{"CreateQueue(min_backoff -1s)", func() error { return newQueue("r7", nil, &cloudtaskspb.RetryConfig{MinBackoff: dur(-time.Second)}) }, codes.InvalidArgument,
			"RetryConfig.minBackoff cannot be negative.", false},
		{"CreateQueue(min_backoff above max_backoff)", func() error {
			return newQueue("r8", nil, &cloudtaskspb.RetryConfig{MinBackoff: dur(time.Minute), MaxBackoff: dur(time.Second)})
		}, codes.InvalidArgument, "RetryConfig.minBackoff must be less than or equal to RetryConfig.maxBackoff.", false},
	}
	for _, tt := range tests {
		err := tt.call()
		st := status.Convert(err)
		if st.Code() != tt.want || st.Message() != tt.wantMsg {
			t.Errorf("%s = %v %q, want %v %q", tt.name, st.Code(), st.Message(), tt.want, tt.wantMsg)
		}
		if got := hasHelp(st); got != tt.wantHelp {
			t.Errorf("%s: Help detail present = %v, want %v (details %v)", tt.name, got, tt.wantHelp, st.Details())
		}
	}

	// The ignored max_burst_size: the queue has the burst the rate gives.
	burst, err := c.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: testLocation + "/queues/burst"})
	if err != nil || burst.GetRateLimits().GetMaxBurstSize() != 100 {
		t.Errorf("GetQueue(created with max_burst_size -1) = burst %d, %v; want 100 (derived from 500/s)", burst.GetRateLimits().GetMaxBurstSize(), err)
	}
}

func hasHelp(st *status.Status) bool {
	for _, d := range st.Details() {
		if h, ok := d.(*errdetails.Help); ok && len(h.GetLinks()) > 0 && h.GetLinks()[0].GetUrl() != "" {
			return true
		}
	}
	return false
}

// Task headers keep the caller's case: in the task the API returns (BASIC
// without the body, FULL with it) and on the wire of the dispatch, where a
// Go server would hide it by canonicalising, so the target here reads the
// raw request. A URL with an escape Go's url.Parse refuses is sent as
// written.
func TestHeaderCaseViewsAndRawURL(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	raw := make(chan string, 1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		var b strings.Builder
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadString('\n')
			b.WriteString(line)
			if err != nil || line == "\r\n" {
				break
			}
		}
		raw <- b.String()
		_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	}()

	q := e.queue(t, "header-case", nil, nil)
	headers := map[string]string{"x-lower-case": "a", "X-MiXed-CaSe": "b", "Content-Type": "application/json"}
	tk := httpTask(q+"/tasks/case", "http://"+l.Addr().String()+"/replay/%zz?x=%zz")
	tk.GetHttpRequest().Headers = headers
	tk.ScheduleTime = timestamppb.New(time.Now().Add(time.Hour))
	e.task(t, q, tk)

	for _, v := range []cloudtaskspb.Task_View{cloudtaskspb.Task_BASIC, cloudtaskspb.Task_FULL} {
		got, err := e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: tk.Name, ResponseView: v})
		if err != nil {
			t.Fatalf("GetTask(%v) = %v", v, err)
		}
		if diff := cmp.Diff(headers, got.GetHttpRequest().GetHeaders()); diff != "" {
			t.Errorf("GetTask(%v) headers mismatch (-want +got):\n%s", v, diff)
		}
		wantBody := map[cloudtaskspb.Task_View]string{cloudtaskspb.Task_BASIC: "", cloudtaskspb.Task_FULL: "payload"}[v]
		if got.View != v || string(got.GetHttpRequest().GetBody()) != wantBody {
			t.Errorf("GetTask(%v) = view %v body %q, want view %v body %q", v, got.View, got.GetHttpRequest().GetBody(), v, wantBody)
		}
	}

	if _, err := e.Client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: tk.Name}); err != nil {
		t.Fatalf("RunTask() = %v", err)
	}
	req := testenv.Await(t, raw, 10*time.Second, "a dispatch to reach the raw target")
	for _, want := range []string{"POST /replay/%zz?x=%zz HTTP/1.1\r\n", "\r\nx-lower-case: a\r\n", "\r\nX-MiXed-CaSe: b\r\n", "\r\nUser-Agent: Google-Cloud-Tasks\r\n"} {
		if !strings.Contains(req, want) {
			t.Errorf("dispatched request lacks %q:\n%s", want, req)
		}
	}
}
