package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/auth/keyset"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestNameRoundTrip(t *testing.T) {
	tests := []string{"TASKS.42", "a%2Fb.1", "under_score.7", "%2E.", "ünï.3", "x-y.9"}
	seen := map[string]string{}
	for _, id := range tests {
		for _, n := range []int{1, 2, 17} {
			name := Name(id, n)
			if len(name) > MaxNameLen || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
				t.Errorf("Name(%q, %d) = %q: not [A-Za-z0-9-_]{1,500}", id, n, name)
			}
			if prev, dup := seen[name]; dup {
				t.Errorf("Name(%q, %d) = %q, also the name of %s", id, n, name, prev)
			}
			seen[name] = id
			gotID, gotN, err := ParseName("projects/p/locations/l/queues/q/tasks/" + name)
			if err != nil || gotID != id || gotN != n {
				t.Errorf("ParseName(%q) = %q, %d, %v, want %q, %d", name, gotID, gotN, err, id, n)
			}
		}
	}
	if got := Name("TASKS.42", 3); got[8] != '-' || !strings.HasSuffix(got, "-TASKS_d42-r3") {
		t.Errorf("Name(TASKS.42, 3) = %q, want <8 hex>-TASKS_d42-r3", got)
	}
	long := strings.Repeat("%2F", 400) + ".1"
	if name := Name(long, 1); len(name) > MaxNameLen {
		t.Errorf("Name(long) has %d characters, want <= %d", len(name), MaxNameLen)
	} else if Name(long+"2", 1) == name {
		t.Errorf("long ids collide")
	} else if _, _, err := ParseName(name); !errors.Is(err, ErrBadName) {
		t.Errorf("ParseName(hashed) = %v, want ErrBadName", err)
	}
	for _, bad := range []string{"", "x", "abcdefgh-r1", "abcdefgh-TASKS_d1-r0", "abcdefgh-TASKS_q1-r1", "00000000-TASKS_d1-r1"} {
		if _, _, err := ParseName(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("ParseName(%q) = %v, want ErrBadName", bad, err)
		}
	}
}

type hit struct {
	body   Body
	auth   string
	header http.Header
}

// replayTarget stands in for the replay function: it returns its URL and
// the tasks dispatched to it (a POST of a task Body; anything else is
// refused and not reported).
func replayTarget(t *testing.T) (string, <-chan hit) {
	hits := make(chan hit, 10)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b Body
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &b); err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		hits <- hit{body: b, auth: r.Header.Get("Authorization"), header: r.Header}
	}))
	t.Cleanup(target.Close)
	return target.URL + "/Replay", hits
}

func TestScheduleDispatchesWithOIDC(t *testing.T) {
	emu := testenv.NewCloudTasks(t)
	queue := emu.Queue(t, "test-project", "dlq-replay")
	replayURL, hits := replayTarget(t)
	now := time.Now()
	s := New(Config{Queue: queue, ReplayURL: replayURL, ServiceAccount: "tasks@test-project.iam.gserviceaccount.com", EmulatorHost: emu.Host},
		WithClock(func() time.Time { return now }))
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	name, created, err := s.Schedule(ctx, Request{EntryID: "TASKS.42", Attempt: 1, At: now.Add(-time.Hour)})
	if err != nil || !created || name != queue+"/tasks/"+Name("TASKS.42", 1) {
		t.Fatalf("Schedule() = %q, %v, %v", name, created, err)
	}
	// The same attempt again (a redelivered classify): success, no new task.
	again, created, err := s.Schedule(ctx, Request{EntryID: "TASKS.42", Attempt: 1, At: now})
	if err != nil || created || again != name {
		t.Errorf("Schedule(same) = %q, %v, %v, want the same name, not created, no error", again, created, err)
	}
	var h hit
	select {
	case h = <-hits:
	case <-ctx.Done():
		t.Fatal("the task was never dispatched")
	}
	if h.body != (Body{EntryID: "TASKS.42", Attempt: 1}) {
		t.Errorf("dispatched body = %+v", h.body)
	}
	raw, ok := strings.CutPrefix(h.auth, "Bearer ")
	if !ok {
		t.Fatalf("Authorization = %q, want a bearer token", h.auth)
	}
	claims, err := keyset.NewVerifier(emu.JWKSURL).Verify(ctx, raw, replayURL)
	if err != nil || claims.Email != "tasks@test-project.iam.gserviceaccount.com" {
		t.Errorf("OIDC token: %+v, %v, want signed for the service account with the replay URL as audience", claims, err)
	}
	if got := h.header.Get("X-Cloudtasks-Taskname"); got != Name("TASKS.42", 1) {
		t.Errorf("X-CloudTasks-TaskName = %q", got)
	}
	select {
	case extra := <-hits:
		t.Errorf("a second dispatch for the same attempt: %+v", extra)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestScheduleLaterDeleteAndList(t *testing.T) {
	emu := testenv.NewCloudTasks(t)
	queue := emu.Queue(t, "test-project", "q")
	now := time.Now()
	s := New(Config{Queue: queue, ReplayURL: "http://127.0.0.1:1/Replay", ServiceAccount: "sa@p.iam.gserviceaccount.com", EmulatorHost: emu.Host},
		WithClock(func() time.Time { return now }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Far beyond 30 days is clamped, not refused.
	n1, _, err := s.Schedule(ctx, Request{EntryID: "S.1", Attempt: 1, At: now.Add(90 * 24 * time.Hour)})
	if err != nil {
		t.Fatalf("Schedule(+90d) = %v", err)
	}
	n2, _, err := s.Schedule(ctx, Request{EntryID: "S.1", Attempt: 2, At: now.Add(time.Hour)})
	if err != nil || n2 == n1 {
		t.Fatalf("Schedule(attempt 2) = %q, %v, want a new name", n2, err)
	}
	var listed []string
	var when []time.Time
	if err := s.Each(ctx, func(name string, at time.Time) bool {
		listed = append(listed, name)
		when = append(when, at)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 {
		t.Fatalf("Each() saw %v, want both tasks", listed)
	}
	for i, at := range when {
		if at.After(now.Add(MaxScheduleAhead)) || at.Before(now.Add(time.Hour-time.Second)) {
			t.Errorf("task %s scheduled at %v, want within (now+1h, now+30d]", listed[i], at)
		}
	}
	if ok, err := s.Exists(ctx, n1); !ok || err != nil {
		t.Errorf("Exists(%s) = %v, %v", n1, ok, err)
	}
	if err := s.Delete(ctx, n1); err != nil {
		t.Errorf("Delete() = %v", err)
	}
	if err := s.Delete(ctx, Name("S.1", 1)); err != nil {
		t.Errorf("Delete(gone) = %v, want nil (NOT_FOUND is success)", err)
	}
	if ok, err := s.Exists(ctx, n1); ok || err != nil {
		t.Errorf("Exists(deleted) = %v, %v", ok, err)
	}
	// A deleted name stays reserved: rescheduling that attempt is not a new
	// task, which is why each attempt gets its own name.
	if _, created, err := s.Schedule(ctx, Request{EntryID: "S.1", Attempt: 1, At: now}); err != nil || created {
		t.Errorf("Schedule(deleted name) = created %v, %v, want reserved (not created, no error)", created, err)
	}
	// Invalid requests are refused before any call, so no task under a
	// bogus name (attempt 0 would be "-r0") can appear in the queue.
	for _, r := range []Request{{EntryID: "", Attempt: 1}, {EntryID: "S.2", Attempt: 0}, {EntryID: "S.2", Attempt: -1}} {
		if name, _, err := s.Schedule(ctx, r); err == nil {
			t.Errorf("Schedule(%+v) = %s, nil, want an error", r, name)
		}
		if ok, err := s.Exists(ctx, Name(r.EntryID, r.Attempt)); ok || err != nil {
			t.Errorf("Exists(%s) after refused Schedule(%+v) = %v, %v, want false, nil", Name(r.EntryID, r.Attempt), r, ok, err)
		}
	}
}

func TestScheduleUnavailableIsRetryable(t *testing.T) {
	// Nothing listens on this port: the error must be retryable so
	// classify returns it and Pub/Sub redelivers.
	s := New(Config{Queue: "projects/test-project/locations/us-central1" + "/queues/q", ReplayURL: "http://127.0.0.1:1/", ServiceAccount: "sa@p", EmulatorHost: "127.0.0.1:1"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := s.Schedule(ctx, Request{EntryID: "S.1", Attempt: 1})
	if err == nil || !Retryable(err) {
		t.Errorf("Schedule(unreachable) = %v, want a retryable error", err)
	}
	if Retryable(status.Error(codes.InvalidArgument, "bad")) || Retryable(nil) {
		t.Errorf("Retryable(InvalidArgument or nil) = true")
	}
}

// A task due in an hour runs at once through Client.RunTask (what
// operator.ReplayNow does with it); a task that is gone is the service's
// NOT_FOUND, not a client error.
func TestClientRunTask(t *testing.T) {
	emu := testenv.NewCloudTasks(t)
	queue := emu.Queue(t, "test-project", "q")
	replayURL, ran := replayTarget(t)
	s := New(Config{Queue: queue, ReplayURL: replayURL, ServiceAccount: "sa@p.iam.gserviceaccount.com", EmulatorHost: emu.Host})
	t.Cleanup(func() { s.Close() })
	c := NewClient(emu.Host)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	name, _, err := s.Schedule(ctx, Request{EntryID: "R.1", Attempt: 1, At: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("Schedule() = %v", err)
	}
	if _, err := c.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: name}); err != nil {
		t.Fatalf("RunTask(%s) = %v", name, err)
	}
	select {
	case h := <-ran:
		if h.body != (Body{EntryID: "R.1", Attempt: 1}) {
			t.Errorf("RunTask dispatched %+v, want R.1 attempt 1", h.body)
		}
	case <-ctx.Done():
		t.Fatal("RunTask: the task was never dispatched")
	}
	gone := s.FullName(Name("R.2", 1))
	if _, err := c.RunTask(ctx, &cloudtaskspb.RunTaskRequest{Name: gone}); status.Code(err) != codes.NotFound {
		t.Errorf("RunTask(%s) = %v, want NOT_FOUND", gone, err)
	}
}
