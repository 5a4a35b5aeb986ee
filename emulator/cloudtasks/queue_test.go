package cloudtasks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
)

func TestQueueLifecycle(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	name := e.queue(t, "lifecycle", nil, nil)

	got, err := e.Client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: name})
	if err != nil {
		t.Fatalf("GetQueue() = %v", err)
	}
	want := &cloudtaskspb.Queue{
		Name:  name,
		State: cloudtaskspb.Queue_RUNNING,
		RateLimits: &cloudtaskspb.RateLimits{
			MaxDispatchesPerSecond: 500, MaxBurstSize: 100, MaxConcurrentDispatches: 1000,
		},
		RetryConfig: &cloudtaskspb.RetryConfig{
			MaxAttempts: 100, MinBackoff: dur(100 * time.Millisecond), MaxBackoff: dur(time.Hour),
			MaxDoublings: 16, MaxRetryDuration: dur(0),
		},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("GetQueue() defaults mismatch (-want +got):\n%s", diff)
	}

	if _, err := e.Client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: testLocation, Queue: &cloudtaskspb.Queue{Name: name}}); codeOf(err) != codes.AlreadyExists {
		t.Errorf("CreateQueue(existing) = %v, want AlreadyExists", err)
	}

	// A masked update changes only the named field; the burst follows the rate.
	upd, err := e.Client.UpdateQueue(ctx, &cloudtaskspb.UpdateQueueRequest{
		Queue:      &cloudtaskspb.Queue{Name: name, RateLimits: &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 10, MaxConcurrentDispatches: 7}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"rate_limits.max_dispatches_per_second"}},
	})
	if err != nil {
		t.Fatalf("UpdateQueue() = %v", err)
	}
	if rl := upd.GetRateLimits(); rl.MaxDispatchesPerSecond != 10 || rl.MaxBurstSize != 10 || rl.MaxConcurrentDispatches != 1000 {
		t.Errorf("UpdateQueue() rate_limits = %v, want 10/s, burst 10, concurrent 1000", rl)
	}
	if _, err := e.Client.UpdateQueue(ctx, &cloudtaskspb.UpdateQueueRequest{
		Queue: &cloudtaskspb.Queue{Name: name}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"state"}},
	}); codeOf(err) != codes.InvalidArgument {
		t.Errorf("UpdateQueue(mask state) = %v, want InvalidArgument", err)
	}

	// UpdateQueue creates a missing queue.
	other := testLocation + "/queues/made-by-update"
	if _, err := e.Client.UpdateQueue(ctx, &cloudtaskspb.UpdateQueueRequest{Queue: &cloudtaskspb.Queue{
		Name: other, RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: 3},
	}}); err != nil {
		t.Fatalf("UpdateQueue(new) = %v", err)
	}

	p, err := e.Client.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: name})
	if err != nil || p.State != cloudtaskspb.Queue_PAUSED {
		t.Fatalf("PauseQueue() = %v, %v; want PAUSED", p.GetState(), err)
	}
	paused := drain(t, "ListQueues(filter)", e.Client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: testLocation, Filter: "state: PAUSED"}))
	if diff := cmp.Diff([]string{name}, queueNames(paused)); diff != "" {
		t.Errorf("ListQueues(state: PAUSED) mismatch (-want +got):\n%s", diff)
	}
	r, err := e.Client.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{Name: name})
	if err != nil || r.State != cloudtaskspb.Queue_RUNNING {
		t.Fatalf("ResumeQueue() = %v, %v; want RUNNING", r.GetState(), err)
	}
	pq, err := e.Client.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{Name: name})
	if err != nil || pq.PurgeTime == nil {
		t.Fatalf("PurgeQueue() = %v, %v; want purge_time set", pq, err)
	}

	// Paging through the queues of the location, one per page.
	all := drain(t, "ListQueues()", e.Client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: testLocation, PageSize: 1}))
	if diff := cmp.Diff([]string{name, other}, queueNames(all)); diff != "" {
		t.Errorf("ListQueues() mismatch (-want +got):\n%s", diff)
	}

	if err := e.Client.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: name}); err != nil {
		t.Fatalf("DeleteQueue() = %v", err)
	}
	if _, err := e.Client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: name}); codeOf(err) != codes.NotFound {
		t.Errorf("GetQueue(deleted) = %v, want NotFound", err)
	}
	if err := e.Client.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: name}); codeOf(err) != codes.NotFound {
		t.Errorf("DeleteQueue(deleted) = %v, want NotFound", err)
	}
	// The name stays in its tombstone window (TestRecordedAnswers checks the answer).
	if _, err := e.Client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: testLocation, Queue: &cloudtaskspb.Queue{Name: name}}); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("CreateQueue(just deleted) = %v, want FailedPrecondition", err)
	}
}

func TestQueueValidation(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		parent string
		queue  *cloudtaskspb.Queue
		want   codes.Code
	}{
		{"bad parent", "projects/p", &cloudtaskspb.Queue{Name: "projects/p/locations/l/queues/q"}, codes.InvalidArgument},
		{"no queue", testLocation, nil, codes.InvalidArgument},
		{"underscore in queue id", testLocation, &cloudtaskspb.Queue{Name: testLocation + "/queues/bad_id"}, codes.InvalidArgument},
		{"queue id too long", testLocation, &cloudtaskspb.Queue{Name: testLocation + "/queues/" + strings.Repeat("q", 101)}, codes.InvalidArgument},
		{"other location", testLocation, &cloudtaskspb.Queue{Name: "projects/test-project/locations/europe-west1/queues/q"}, codes.InvalidArgument},
		{"rate above 500", testLocation, &cloudtaskspb.Queue{Name: testLocation + "/queues/q1", RateLimits: &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 501}}, codes.InvalidArgument},
		{"concurrency above 5000", testLocation, &cloudtaskspb.Queue{Name: testLocation + "/queues/q2", RateLimits: &cloudtaskspb.RateLimits{MaxConcurrentDispatches: 5001}}, codes.InvalidArgument},
		{"attempts below -1", testLocation, &cloudtaskspb.Queue{Name: testLocation + "/queues/q3", RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: -2}}, codes.InvalidArgument},
		{"min above max backoff", testLocation, &cloudtaskspb.Queue{Name: testLocation + "/queues/q4", RetryConfig: &cloudtaskspb.RetryConfig{MinBackoff: dur(time.Minute), MaxBackoff: dur(time.Second)}}, codes.InvalidArgument},
		{"negative doublings", testLocation, &cloudtaskspb.Queue{Name: testLocation + "/queues/q5", RetryConfig: &cloudtaskspb.RetryConfig{MaxDoublings: -1}}, codes.InvalidArgument},
		{"valid", testLocation, &cloudtaskspb.Queue{Name: testLocation + "/queues/ok-1", RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: -1}}, codes.OK},
	}
	for _, tt := range tests {
		_, err := e.Client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: tt.parent, Queue: tt.queue})
		if got := codeOf(err); got != tt.want {
			t.Errorf("CreateQueue(%s) = %v, want %v", tt.name, err, tt.want)
		}
	}
	for _, bad := range []string{"", "queues/q", testLocation + "/queues/", testLocation + "/queues/a/b"} {
		if _, err := e.Client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: bad}); codeOf(err) != codes.InvalidArgument {
			t.Errorf("GetQueue(%q) = %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := e.Client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: testLocation + "/queues/missing"}); codeOf(err) != codes.NotFound {
		t.Errorf("GetQueue(missing) = %v, want NotFound", err)
	}
	it := e.Client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: testLocation, Filter: "name:foo"})
	if _, err := it.Next(); codeOf(err) != codes.InvalidArgument {
		t.Errorf("ListQueues(filter name:foo) = %v, want InvalidArgument", err)
	}
}

// The real service refuses a recently deleted queue name (while the queue
// itself answers NOT_FOUND) and any change of state of a DISABLED queue with
// FAILED_PRECONDITION.
func TestQueueFailedPrecondition(t *testing.T) {
	t.Parallel()
	clock := cloudtasks.NewFakeClock(time.Now())
	e := startEmu(t, cloudtasks.WithClock(clock), cloudtasks.WithQueueTombstone(cloudtasks.DefaultQueueTombstone))
	ctx := context.Background()
	name := e.queue(t, "tombstoned", nil, nil)
	if err := e.Client.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: name}); err != nil {
		t.Fatalf("DeleteQueue() = %v", err)
	}
	if _, err := e.Client.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: testLocation, Queue: &cloudtaskspb.Queue{Name: name}}); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("CreateQueue(recently deleted) = %v, want FailedPrecondition", err)
	}
	if _, err := e.Client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: name, Task: httpTask("", "http://127.0.0.1:1/")}); codeOf(err) != codes.NotFound {
		t.Errorf("CreateTask(recently deleted queue) = %v, want NotFound", err)
	}
	clock.Advance(73 * time.Hour)
	e.queue(t, "tombstoned", nil, nil)

	// WithQueueTombstone(0) frees a deleted name at once.
	free := startEmu(t, cloudtasks.WithQueueTombstone(0))
	reused := free.queue(t, "reused", nil, nil)
	if err := free.Client.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{Name: reused}); err != nil {
		t.Fatalf("DeleteQueue() = %v", err)
	}
	free.queue(t, "reused", nil, nil)

	dis := e.queue(t, "disabled", nil, nil)
	if err := e.Server.DisableQueue(dis); err != nil {
		t.Fatalf("DisableQueue() = %v", err)
	}
	if _, err := e.Client.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: dis}); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("PauseQueue(disabled) = %v, want FailedPrecondition", err)
	}
	if _, err := e.Client.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{Name: dis}); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("ResumeQueue(disabled) = %v, want FailedPrecondition", err)
	}
	// Tasks may still be added to a disabled queue.
	e.task(t, dis, httpTask("", "http://127.0.0.1:1/"))
}
