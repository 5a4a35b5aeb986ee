package cloudtasks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/auth/keyset"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func TestCreateTaskValidation(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	q := e.queue(t, "validation", nil, nil)
	good := "http://127.0.0.1:1/handler"
	withReq := func(mod func(*cloudtaskspb.HttpRequest)) *cloudtaskspb.Task {
		tk := httpTask("", good)
		mod(tk.GetHttpRequest())
		return tk
	}
	tests := []struct {
		name   string
		parent string
		task   *cloudtaskspb.Task
		want   codes.Code
	}{
		{"bad parent", "projects/p/queues/q", httpTask("", good), codes.InvalidArgument},
		{"missing queue", testLocation + "/queues/missing", httpTask("", good), codes.NotFound},
		{"no task", q, nil, codes.InvalidArgument},
		{"no payload", q, &cloudtaskspb.Task{}, codes.InvalidArgument},
		{"app engine", q, &cloudtaskspb.Task{MessageType: &cloudtaskspb.Task_AppEngineHttpRequest{AppEngineHttpRequest: &cloudtaskspb.AppEngineHttpRequest{RelativeUri: "/x"}}}, codes.Unimplemented},
		{"dot in task id", q, httpTask(q+"/tasks/a.b", good), codes.InvalidArgument},
		{"task id 501 chars", q, httpTask(q+"/tasks/"+strings.Repeat("a", 501), good), codes.InvalidArgument},
		{"task id 500 chars", q, httpTask(q+"/tasks/"+strings.Repeat("a", 500), good), codes.OK},
		{"task in other queue", q, httpTask(testLocation+"/queues/other/tasks/t1", good), codes.InvalidArgument},
		{"malformed task name", q, httpTask("t1", good), codes.InvalidArgument},
		{"ftp url", q, httpTask("", "ftp://example.com/x"), codes.InvalidArgument},
		{"relative url", q, httpTask("", "/handler"), codes.InvalidArgument},
		{"empty url", q, httpTask("", ""), codes.InvalidArgument},
		{"31 days ahead", q, func() *cloudtaskspb.Task {
			tk := httpTask("", good)
			tk.ScheduleTime = timestamppb.New(time.Now().Add(31 * 24 * time.Hour))
			return tk
		}(), codes.InvalidArgument},
		{"29 days ahead", q, func() *cloudtaskspb.Task {
			tk := httpTask("", good)
			tk.ScheduleTime = timestamppb.New(time.Now().Add(29 * 24 * time.Hour))
			return tk
		}(), codes.OK},
		{"deadline 5s", q, func() *cloudtaskspb.Task {
			tk := httpTask("", good)
			tk.DispatchDeadline = dur(5 * time.Second)
			return tk
		}(), codes.InvalidArgument},
		{"deadline 31m", q, func() *cloudtaskspb.Task {
			tk := httpTask("", good)
			tk.DispatchDeadline = dur(31 * time.Minute)
			return tk
		}(), codes.InvalidArgument},
		{"body over 1 MB", q, withReq(func(r *cloudtaskspb.HttpRequest) { r.Body = make([]byte, cloudtasks.MaxTaskSize+1) }), codes.InvalidArgument},
		{"body with GET", q, withReq(func(r *cloudtaskspb.HttpRequest) { r.HttpMethod = cloudtaskspb.HttpMethod_GET }), codes.InvalidArgument},
		{"header with newline", q, withReq(func(r *cloudtaskspb.HttpRequest) { r.Headers = map[string]string{"X-A": "a\r\nb"} }), codes.InvalidArgument},
		{"oidc without email", q, withReq(func(r *cloudtaskspb.HttpRequest) {
			r.AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{}}
		}), codes.InvalidArgument},
		{"negative max attempts", q, func() *cloudtaskspb.Task {
			tk := httpTask("", good)
			tk.RetryConfig = &cloudtaskspb.RetryConfig{MaxAttempts: -5}
			return tk
		}(), codes.InvalidArgument},
	}
	for _, tt := range tests {
		// Far in the future so nothing is dispatched to the dead URL.
		if tt.task != nil && tt.task.ScheduleTime == nil {
			tt.task.ScheduleTime = timestamppb.New(time.Now().Add(time.Hour))
		}
		_, err := e.Client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: tt.parent, Task: tt.task})
		if got := codeOf(err); got != tt.want {
			t.Errorf("CreateTask(%s) = %v, want %v", tt.name, err, tt.want)
		}
	}
	for _, bad := range []string{"", q, q + "/tasks/", q + "/tasks/a b"} {
		if _, err := e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: bad}); codeOf(err) != codes.InvalidArgument {
			t.Errorf("GetTask(%q) = %v, want InvalidArgument", bad, err)
		}
	}
	for _, missing := range []string{q + "/tasks/nope", testLocation + "/queues/nope/tasks/t"} {
		if _, err := e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: missing}); codeOf(err) != codes.NotFound {
			t.Errorf("GetTask(%q) = %v, want NotFound", missing, err)
		}
		if err := e.Client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: missing}); codeOf(err) != codes.NotFound {
			t.Errorf("DeleteTask(%q) = %v, want NotFound", missing, err)
		}
		if _, err := e.Client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: missing}); codeOf(err) != codes.NotFound {
			t.Errorf("RunTask(%q) = %v, want NotFound", missing, err)
		}
	}
}

func TestTaskCRUDAndViews(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	q := e.queue(t, "crud", nil, nil)
	later := timestamppb.New(time.Now().Add(time.Hour))

	tk := httpTask(q+"/tasks/named-1", "https://example.com/x")
	tk.ScheduleTime = later
	tk.GetHttpRequest().Headers = map[string]string{"Content-Type": "application/json"}
	basic := e.task(t, q, tk)
	if basic.View != cloudtaskspb.Task_BASIC || basic.GetHttpRequest().Body != nil {
		t.Errorf("CreateTask(default view) = view %v body %q, want BASIC without body", basic.View, basic.GetHttpRequest().Body)
	}
	if !basic.ScheduleTime.AsTime().Equal(later.AsTime().Truncate(time.Microsecond)) || basic.CreateTime == nil || basic.DispatchDeadline.AsDuration() != 10*time.Minute {
		t.Errorf("CreateTask() = schedule %v create %v deadline %v, want the given time, a create time, 10m", basic.ScheduleTime.AsTime(), basic.CreateTime, basic.DispatchDeadline.AsDuration())
	}
	full, err := e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: basic.Name, ResponseView: cloudtaskspb.Task_FULL})
	if err != nil {
		t.Fatalf("GetTask(FULL) = %v", err)
	}
	if full.View != cloudtaskspb.Task_FULL || string(full.GetHttpRequest().Body) != "payload" || full.GetHttpRequest().Headers["Content-Type"] != "application/json" {
		t.Errorf("GetTask(FULL) = %v, want the body and headers", full)
	}
	if _, err := e.Client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q, Task: tk}); codeOf(err) != codes.AlreadyExists {
		t.Errorf("CreateTask(existing name) = %v, want AlreadyExists", err)
	}

	// Generated names are unique and well-formed.
	names := map[string]bool{basic.Name: true}
	for i := 0; i < 24; i++ {
		g := httpTask("", "https://example.com/x")
		g.ScheduleTime = later
		got, err := e.Client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q, Task: g, ResponseView: cloudtaskspb.Task_FULL})
		if err != nil {
			t.Fatalf("CreateTask(generated) = %v", err)
		}
		if !strings.HasPrefix(got.Name, q+"/tasks/") || names[got.Name] || string(got.GetHttpRequest().Body) != "payload" {
			t.Fatalf("CreateTask(generated, FULL) = %q body %q; want a fresh name in the queue and the body", got.Name, got.GetHttpRequest().Body)
		}
		names[got.Name] = true
	}

	// ListTasks pages through all 25 exactly once.
	seen := map[string]int{}
	pages := 0
	pager := iterator.NewPager(e.Client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: q}), 10, "")
	for {
		var page []*cloudtaskspb.Task
		token, err := pager.NextPage(&page)
		if err != nil {
			t.Fatalf("ListTasks(page %d) = %v", pages, err)
		}
		pages++
		for _, lt := range page {
			seen[lt.Name]++
			if lt.GetHttpRequest().Body != nil {
				t.Errorf("ListTasks(BASIC) returned a body for %s", lt.Name)
			}
		}
		if token == "" {
			break
		}
	}
	if pages != 3 || len(seen) != 25 {
		t.Errorf("ListTasks(page_size 10) = %d tasks in %d pages, want 25 in 3", len(seen), pages)
	}
	for n, c := range seen {
		if c != 1 || !names[n] {
			t.Errorf("ListTasks() returned %s %d times", n, c)
		}
	}
	if _, err := e.Client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: q, PageToken: "%%%"}).Next(); codeOf(err) != codes.InvalidArgument {
		t.Errorf("ListTasks(bad token) = %v, want InvalidArgument", err)
	}
	// The iterator of the official client drives the same paging.
	if n := len(drain(t, "ListTasks", e.Client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: q, PageSize: 7}))); n != 25 {
		t.Errorf("ListTasks iterator = %d tasks, want 25", n)
	}

	if err := e.Client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: basic.Name}); err != nil {
		t.Fatalf("DeleteTask() = %v", err)
	}
	if _, err := e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: basic.Name}); codeOf(err) != codes.NotFound {
		t.Errorf("GetTask(deleted) = %v, want NotFound", err)
	}
	if _, err := e.Client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q, Task: tk}); codeOf(err) != codes.AlreadyExists {
		t.Errorf("CreateTask(deleted name) = %v, want AlreadyExists (reserved for an hour)", err)
	}

	// Purge removes every task (TestDeletedQueueAndTaskAreNotDispatched covers dispatch).
	if _, err := e.Client.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{Name: q}); err != nil {
		t.Fatalf("PurgeQueue() = %v", err)
	}
	if lt, err := e.Client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: q}).Next(); err != iterator.Done {
		t.Errorf("ListTasks(after purge) = %v, %v; want none", lt.GetName(), err)
	}
}

// TestDispatchHeadersAndBookkeeping walks one task through the recorded
// sequence of the real service, 503, 404, 200, using RunTask to skip the
// hour-long backoff, checking the headers of each request (as recorded) and
// the task's counters in between.
func TestDispatchHeadersAndBookkeeping(t *testing.T) {
	t.Parallel()
	logs := &testenv.LogBuffer{}
	e := startEmu(t, cloudtasks.WithLogger(obs.NewLogger(logs, obs.WithComponent("cloudtasks-emulator"))))
	ctx := context.Background()
	statuses := []int{http.StatusServiceUnavailable, http.StatusNotFound, http.StatusOK}
	tg := newTarget(t, func(n int, _ hit) int { return statuses[min(n, 2)] })
	q := e.queue(t, "headers", nil, &cloudtaskspb.RetryConfig{MinBackoff: dur(time.Hour), MaxBackoff: dur(time.Hour)})

	tk := httpTask(q+"/tasks/replay-42", tg.URL+"/replay?x=1")
	tk.GetHttpRequest().HttpMethod = cloudtaskspb.HttpMethod_PUT
	tk.GetHttpRequest().Headers = map[string]string{
		"Content-Type": "application/json", "X-Custom": "v",
		"User-Agent": "spoofed", "X-CloudTasks-TaskRetryCount": "99", "X-Google-Foo": "no",
	}
	created := e.task(t, q, tk)
	testenv.WaitUntil(t, 10*time.Second, "first attempt", func() bool { return tg.count() == 1 })

	h := tg.snapshot()[0]
	eta, err := strconv.ParseFloat(h.header.Get(cloudtasks.HeaderETA), 64)
	if err != nil {
		t.Fatalf("%s = %q, want seconds since epoch", cloudtasks.HeaderETA, h.header.Get(cloudtasks.HeaderETA))
	}
	if want := float64(created.ScheduleTime.AsTime().UnixNano()) / 1e9; eta < want-1e-5 || eta > want+1e-5 {
		t.Errorf("%s = %f, want %f (schedule_time)", cloudtasks.HeaderETA, eta, want)
	}
	wantHeaders := map[string]string{
		"X-Cloudtasks-Queuename":            "headers",
		"X-Cloudtasks-Taskname":             "replay-42",
		"X-Cloudtasks-Taskretrycount":       "0",
		"X-Cloudtasks-Taskexecutioncount":   "0",
		"X-Cloudtasks-Taskpreviousresponse": absent,
		"X-Cloudtasks-Taskretryreason":      absent,
		"User-Agent":                        "Google-Cloud-Tasks",
		"Content-Type":                      "application/json",
		"X-Custom":                          "v",
		"X-Google-Foo":                      absent,
		"Authorization":                     absent,
	}
	checkHeaders(t, "attempt 1", h, wantHeaders)
	if h.method != http.MethodPut || h.path != "/replay" || string(h.body) != "payload" {
		t.Errorf("attempt 1 = %s %s %q, want PUT /replay \"payload\"", h.method, h.path, h.body)
	}

	// After the 503: one dispatch, one response, rescheduled an hour later.
	var got *cloudtaskspb.Task
	testenv.WaitUntil(t, 10*time.Second, "first attempt recorded", func() bool {
		got, err = e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: created.Name})
		return err == nil && got.GetLastAttempt().GetResponseTime() != nil
	})
	if got.DispatchCount != 1 || got.ResponseCount != 1 {
		t.Errorf("after attempt 1: dispatch_count %d response_count %d, want 1 1", got.DispatchCount, got.ResponseCount)
	}
	if got.FirstAttempt.GetDispatchTime() == nil || got.FirstAttempt.GetResponseTime() != nil {
		t.Errorf("first_attempt = %v, want only dispatch_time", got.FirstAttempt)
	}
	la := got.LastAttempt
	if la.GetScheduleTime() == nil || la.GetDispatchTime() == nil || la.GetResponseStatus().GetCode() != int32(codes.Unavailable) {
		t.Errorf("last_attempt = %v, want schedule/dispatch/response times and UNAVAILABLE for 503", la)
	}
	if d := got.ScheduleTime.AsTime().Sub(la.ResponseTime.AsTime()); d < time.Hour-time.Second || d > time.Hour+time.Second {
		t.Errorf("schedule_time after 503 = response + %v, want + 1h (min_backoff)", d)
	}

	ran, err := e.Client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: created.Name})
	if err != nil || ran.DispatchCount != 2 {
		t.Fatalf("RunTask() = dispatch_count %d, %v; want 2", ran.GetDispatchCount(), err)
	}
	testenv.WaitUntil(t, 10*time.Second, "second attempt", func() bool { return tg.count() == 2 })
	wantHeaders["X-Cloudtasks-Taskretrycount"] = "1"
	wantHeaders["X-Cloudtasks-Taskexecutioncount"] = "0" // a 5xx does not count as an execution
	wantHeaders["X-Cloudtasks-Taskpreviousresponse"] = "503"
	wantHeaders["X-Cloudtasks-Taskretryreason"] = "" // present, empty
	checkHeaders(t, "attempt 2", tg.snapshot()[1], wantHeaders)

	testenv.WaitUntil(t, 10*time.Second, "second attempt recorded", func() bool {
		got, err = e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: created.Name})
		return err == nil && got.ResponseCount == 2
	})
	if _, err := e.Client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: created.Name}); err != nil {
		t.Fatalf("RunTask(2) = %v", err)
	}
	testenv.WaitUntil(t, 10*time.Second, "third attempt", func() bool { return tg.count() == 3 })
	wantHeaders["X-Cloudtasks-Taskretrycount"] = "2"
	wantHeaders["X-Cloudtasks-Taskexecutioncount"] = "1"
	wantHeaders["X-Cloudtasks-Taskpreviousresponse"] = "404"
	checkHeaders(t, "attempt 3", tg.snapshot()[2], wantHeaders)

	// The 200 deletes the task and reserves its name.
	e.waitDeleted(t, created.Name, "deletion after 2xx")
	if _, err := e.Client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q, Task: tk}); codeOf(err) != codes.AlreadyExists {
		t.Errorf("CreateTask(completed name) = %v, want AlreadyExists", err)
	}

	// Every dispatch is one JSON log line with queue, task, attempt, status, latency.
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		if m["message"] == "dispatch" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("dispatch log lines = %d, want 3:\n%s", len(lines), logs.String())
	}
	for i, m := range lines {
		want := map[string]any{"queue": "headers", "task": "replay-42", "attempt": float64(i + 1), "status": float64(statuses[i]), "severity": "INFO"}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("dispatch log %d: %s = %v, want %v", i, k, m[k], v)
			}
		}
		if _, ok := m["latency_ms"].(float64); !ok {
			t.Errorf("dispatch log %d: latency_ms = %v, want a number", i, m["latency_ms"])
		}
	}
	if lines[2]["outcome"] != "success" || lines[0]["outcome"] != "retry" {
		t.Errorf("dispatch outcomes = %v, %v, want retry ... success", lines[0]["outcome"], lines[2]["outcome"])
	}
}

// absent in checkHeaders' want means the header was not sent at all (an
// empty value means it was sent empty).
const absent = "<absent>"

func checkHeaders(t *testing.T, what string, h hit, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for k := range want {
		got[k] = absent
		if v, ok := h.header[http.CanonicalHeaderKey(k)]; ok {
			got[k] = strings.Join(v, ",")
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s headers mismatch (-want +got):\n%s", what, diff)
	}
}

func TestRunTaskIgnoresPauseAndSchedule(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	tg := newTarget(t, nil)
	q := e.queue(t, "run-now", nil, nil)
	e.pause(t, q)
	tk := httpTask("", tg.URL)
	tk.ScheduleTime = timestamppb.New(time.Now().Add(24 * time.Hour))
	created := e.task(t, q, tk)
	ran, err := e.Client.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: created.Name, ResponseView: cloudtaskspb.Task_FULL})
	if err != nil {
		t.Fatalf("RunTask() = %v", err)
	}
	if ran.DispatchCount != 1 || ran.GetLastAttempt().GetDispatchTime() == nil || ran.GetLastAttempt().GetResponseTime() != nil || string(ran.GetHttpRequest().Body) != "payload" {
		t.Errorf("RunTask() = %v, want dispatched, no response yet, FULL view", ran)
	}
	testenv.WaitUntil(t, 10*time.Second, "forced dispatch", func() bool { return tg.count() == 1 })
	e.waitDeleted(t, created.Name, "deletion")
}

func TestPauseResumeDispatch(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	tg := newTarget(t, nil)
	q := e.queue(t, "pausable", nil, nil)
	e.pause(t, q)
	for i := 0; i < 3; i++ {
		e.task(t, q, httpTask("", tg.URL))
	}
	time.Sleep(300 * time.Millisecond)
	if n := tg.count(); n != 0 {
		t.Fatalf("paused queue dispatched %d tasks, want 0", n)
	}
	e.resume(t, q)
	testenv.WaitUntil(t, 10*time.Second, "dispatch after resume", func() bool { return tg.count() == 3 })
}

func TestDeletedQueueAndTaskAreNotDispatched(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	tg := newTarget(t, nil)
	soon := timestamppb.New(time.Now().Add(300 * time.Millisecond))
	qa := e.queue(t, "to-delete", nil, nil)
	qb := e.queue(t, "keeps-one", nil, nil)
	for i := 0; i < 3; i++ {
		tk := httpTask("", tg.URL+"/a")
		tk.ScheduleTime = soon
		e.task(t, qa, tk)
	}
	gone := httpTask(qb+"/tasks/gone", tg.URL+"/gone")
	gone.ScheduleTime = soon
	e.task(t, qb, gone)
	kept := httpTask(qb+"/tasks/kept", tg.URL+"/kept")
	kept.ScheduleTime = soon
	e.task(t, qb, kept)
	if err := e.Client.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: qa}); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: gone.Name}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, 10*time.Second, "the kept task", func() bool { return tg.count() >= 1 })
	time.Sleep(200 * time.Millisecond)
	hits := tg.snapshot()
	if len(hits) != 1 || hits[0].path != "/kept" {
		var paths []string
		for _, h := range hits {
			paths = append(paths, h.path)
		}
		t.Errorf("dispatched %v, want only /kept", paths)
	}
}

// The name of a finished task stays taken for an hour of the injected clock.
func TestNameReservationOneHour(t *testing.T) {
	t.Parallel()
	clock := cloudtasks.NewFakeClock(time.Now())
	e := startEmu(t, cloudtasks.WithClock(clock))
	ctx := context.Background()
	tg := newTarget(t, nil)
	q := e.queue(t, "reserve", nil, nil)

	done := httpTask(q+"/tasks/done", tg.URL)
	e.task(t, q, done) // due at once: fake now
	testenv.WaitUntil(t, 10*time.Second, "completion", func() bool {
		_, err := e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: done.Name})
		return codeOf(err) == codes.NotFound
	})
	deleted := httpTask(q+"/tasks/deleted", tg.URL)
	deleted.ScheduleTime = timestamppb.New(clock.Now().Add(24 * time.Hour))
	e.task(t, q, deleted)
	if err := e.Client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: deleted.Name}); err != nil {
		t.Fatal(err)
	}

	for _, step := range []struct {
		advance time.Duration
		want    codes.Code
	}{
		{0, codes.AlreadyExists},
		{59 * time.Minute, codes.AlreadyExists},
		{2 * time.Minute, codes.OK},
	} {
		clock.Advance(step.advance)
		for _, tk := range []*cloudtaskspb.Task{done, deleted} {
			tk.ScheduleTime = timestamppb.New(clock.Now().Add(24 * time.Hour))
			_, err := e.Client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q, Task: tk})
			if got := codeOf(err); got != step.want {
				t.Errorf("CreateTask(%s) %v after the first run = %v, want %v", shortID(tk.Name), clock.Now().Sub(time.Time{}), err, step.want)
			}
		}
	}
	if n := tg.count(); n != 1 {
		t.Errorf("target hits = %d, want 1", n)
	}
}

func shortID(name string) string { return name[strings.LastIndex(name, "/")+1:] }

func TestDispatchDeadlineExceeded(t *testing.T) {
	t.Parallel()
	e := startEmu(t, cloudtasks.WithDispatchDeadlineBounds(50*time.Millisecond, time.Minute))
	ctx := context.Background()
	release := make(chan struct{})
	tg := newTarget(t, func(int, hit) int {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return http.StatusOK
	})
	t.Cleanup(func() { close(release) }) // before the target's Close, which waits for the handler
	q := e.queue(t, "slow", nil, &cloudtaskspb.RetryConfig{MinBackoff: dur(time.Hour), MaxBackoff: dur(time.Hour)})
	tk := httpTask("", tg.URL)
	tk.DispatchDeadline = dur(150 * time.Millisecond)
	created := e.task(t, q, tk)
	var got *cloudtaskspb.Task
	testenv.WaitUntil(t, 10*time.Second, "timed-out attempt recorded", func() bool {
		var err error
		got, err = e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: created.Name})
		return err == nil && got.GetLastAttempt().GetResponseTime() != nil
	})
	if got.DispatchCount != 1 || got.ResponseCount != 0 || got.LastAttempt.ResponseStatus.GetCode() != int32(codes.DeadlineExceeded) {
		t.Errorf("after timeout: dispatch %d response %d status %v, want 1, 0, DEADLINE_EXCEEDED", got.DispatchCount, got.ResponseCount, got.LastAttempt.ResponseStatus)
	}
	if !got.ScheduleTime.AsTime().After(time.Now().Add(50 * time.Minute)) {
		t.Errorf("schedule_time after timeout = %v, want about an hour ahead", got.ScheduleTime.AsTime())
	}
}

func TestOAuthTokenHeader(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	tg := newTarget(t, nil)
	q := e.queue(t, "oauth", nil, nil)
	tk := httpTask("", tg.URL)
	tk.GetHttpRequest().AuthorizationHeader = &cloudtaskspb.HttpRequest_OauthToken{OauthToken: &cloudtaskspb.OAuthToken{ServiceAccountEmail: "sa@p.iam.gserviceaccount.com"}}
	created := e.task(t, q, tk)
	if got := created.GetHttpRequest().GetOauthToken().GetScope(); got != "https://www.googleapis.com/auth/cloud-platform" {
		t.Errorf("oauth_token.scope = %q, want the cloud-platform default", got)
	}
	testenv.WaitUntil(t, 10*time.Second, "dispatch", func() bool { return tg.count() == 1 })
	if a := tg.snapshot()[0].header.Get("Authorization"); !strings.HasPrefix(a, "Bearer ya29.") {
		t.Errorf("Authorization = %q, want an opaque Bearer token", a)
	}
}

func TestConcurrencyCap(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	var mu = make(chan struct{}, 1)
	inFlight, peak := 0, 0
	tg := newTarget(t, func(int, hit) int {
		mu <- struct{}{}
		inFlight++
		peak = max(peak, inFlight)
		<-mu
		time.Sleep(100 * time.Millisecond)
		mu <- struct{}{}
		inFlight--
		<-mu
		return http.StatusOK
	})
	q := e.queue(t, "capped", &cloudtaskspb.RateLimits{MaxConcurrentDispatches: 2}, nil)
	for i := 0; i < 6; i++ {
		e.task(t, q, httpTask(fmt.Sprintf("%s/tasks/c%d", q, i), tg.URL))
	}
	testenv.WaitUntil(t, 20*time.Second, "all six", func() bool { return tg.count() == 6 })
	mu <- struct{}{}
	defer func() { <-mu }()
	if peak > 2 {
		t.Errorf("peak concurrent dispatches = %d, want <= 2 (max_concurrent_dispatches)", peak)
	}
	t.Logf("peak concurrent dispatches: %d", peak)
}

// The token bucket allows max_burst_size at once, then max_dispatches_per_second.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	tg := newTarget(t, nil)
	const rate, n = 5.0, 12
	q := e.queue(t, "limited", &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: rate}, nil)
	got, err := e.Client.GetQueue(context.Background(), &cloudtaskspb.GetQueueRequest{Name: q})
	if err != nil {
		t.Fatal(err)
	}
	burst := int(got.RateLimits.MaxBurstSize)
	if burst != 5 {
		t.Errorf("max_burst_size for 5/s = %d, want 5", burst)
	}
	e.pause(t, q)
	for i := 0; i < n; i++ {
		e.task(t, q, httpTask("", tg.URL))
	}
	e.resume(t, q)
	testenv.WaitUntil(t, 20*time.Second, "all tasks", func() bool { return tg.count() == n })
	hits := tg.snapshot()
	// Between hits i and j at most burst + rate*elapsed dispatches can have
	// happened; one extra allows for arrival jitter.
	for i := range hits {
		for j := i + 1; j < len(hits); j++ {
			allowed := float64(burst) + rate*hits[j].at.Sub(hits[i].at).Seconds() + 1
			if float64(j-i+1) > allowed {
				t.Errorf("hits %d..%d: %d dispatches in %v, more than the bucket allows (%.1f)", i, j, j-i+1, hits[j].at.Sub(hits[i].at), allowed)
			}
		}
	}
}

// A queue-level http_target rewrites every task's request at dispatch.
func TestQueueHTTPTargetOverrides(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	tg := newTarget(t, nil)
	_, port, _ := strings.Cut(strings.TrimPrefix(tg.URL, "http://"), ":")
	p, _ := strconv.ParseInt(port, 10, 64)
	host := "127.0.0.1"
	q, err := e.Client.CreateQueue(context.Background(), &cloudtaskspb.CreateQueueRequest{Parent: testLocation, Queue: &cloudtaskspb.Queue{
		Name: testLocation + "/queues/overridden",
		HttpTarget: &cloudtaskspb.HttpTarget{
			HttpMethod:      cloudtaskspb.HttpMethod_PATCH,
			HeaderOverrides: []*cloudtaskspb.HttpTarget_HeaderOverride{{Header: &cloudtaskspb.HttpTarget_Header{Key: "X-Env", Value: "local"}}},
			UriOverride: &cloudtaskspb.UriOverride{
				Host: &host, Port: &p,
				PathOverride:  &cloudtaskspb.PathOverride{Path: "/Replay"},
				QueryOverride: &cloudtaskspb.QueryOverride{QueryParams: "via=queue"},
			},
			AuthorizationHeader: &cloudtaskspb.HttpTarget_OidcToken{OidcToken: &cloudtaskspb.OidcToken{ServiceAccountEmail: "queue@p.iam.gserviceaccount.com", Audience: "aud-q"}},
		},
	}})
	if err != nil {
		t.Fatalf("CreateQueue(http_target) = %v", err)
	}
	e.task(t, q.Name, httpTask("", "http://unreachable.invalid:1/original?x=1"))
	testenv.WaitUntil(t, 10*time.Second, "overridden dispatch", func() bool { return tg.count() == 1 })
	h := tg.snapshot()[0]
	if h.method != http.MethodPatch || h.path != "/Replay" || h.header.Get("X-Env") != "local" {
		t.Errorf("dispatch = %s %s X-Env %q, want PATCH /Replay local", h.method, h.path, h.header.Get("X-Env"))
	}
	raw := strings.TrimPrefix(h.header.Get("Authorization"), "Bearer ")
	if c, err := keyset.NewVerifier(e.JWKSURL).Verify(context.Background(), raw, "aud-q"); err != nil || c.Email != "queue@p.iam.gserviceaccount.com" {
		t.Errorf("Verify(queue-level OIDC) = %v, %v; want the queue's service account", c, err)
	}
}

// Under a fake clock, schedule times and backoffs elapse only on Advance.
func TestFakeClockDrivesSchedule(t *testing.T) {
	t.Parallel()
	clock := cloudtasks.NewFakeClock(time.Now())
	e := startEmu(t, cloudtasks.WithClock(clock))
	ctx := context.Background()
	tg := newTarget(t, func(n int, _ hit) int {
		if n == 0 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	q := e.queue(t, "fake-time", nil, &cloudtaskspb.RetryConfig{MinBackoff: dur(time.Minute), MaxBackoff: dur(time.Hour)})
	tk := httpTask(q+"/tasks/later", tg.URL)
	tk.ScheduleTime = timestamppb.New(clock.Now().Add(10 * time.Minute))
	e.task(t, q, tk)

	time.Sleep(100 * time.Millisecond)
	if n := tg.count(); n != 0 {
		t.Fatalf("dispatched %d before the fake clock reached the schedule time, want 0", n)
	}
	clock.Advance(10 * time.Minute)
	testenv.WaitUntil(t, 10*time.Second, "first attempt", func() bool { return tg.count() == 1 })
	testenv.WaitUntil(t, 10*time.Second, "failure recorded", func() bool {
		got, err := e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: tk.Name})
		return err == nil && got.ResponseCount == 1
	})
	clock.Advance(59 * time.Second)
	time.Sleep(100 * time.Millisecond)
	if n := tg.count(); n != 1 {
		t.Fatalf("dispatched %d times before min_backoff elapsed on the fake clock, want 1", n)
	}
	clock.Advance(time.Second)
	testenv.WaitUntil(t, 10*time.Second, "retry after min_backoff", func() bool { return tg.count() == 2 })
	eta, _ := strconv.ParseFloat(tg.snapshot()[1].header.Get(cloudtasks.HeaderETA), 64)
	first, _ := strconv.ParseFloat(tg.snapshot()[0].header.Get(cloudtasks.HeaderETA), 64)
	if d := time.Duration((eta - first) * 1e9); d < time.Minute || d > time.Minute+time.Second {
		t.Errorf("retry ETA - first ETA = %v, want 1m (fake)", d)
	}
}
