package cloudtasks_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/internal/testenv"
)

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name string
		rc   *cloudtaskspb.RetryConfig
		want []time.Duration
	}{
		{
			// The example of the RetryConfig.max_doublings documentation.
			name: "doc example 10s..300s, 3 doublings",
			rc:   &cloudtaskspb.RetryConfig{MinBackoff: dur(10 * s), MaxBackoff: dur(300 * s), MaxDoublings: 3},
			want: []time.Duration{10 * s, 20 * s, 40 * s, 80 * s, 160 * s, 240 * s, 300 * s, 300 * s},
		},
		{
			name: "one doubling then linear by 2*min",
			rc:   &cloudtaskspb.RetryConfig{MinBackoff: dur(s), MaxBackoff: dur(time.Hour), MaxDoublings: 1},
			want: []time.Duration{s, 2 * s, 4 * s, 6 * s, 8 * s},
		},
		{
			name: "defaults: 0.1s doubling 16 times, capped at 1h",
			rc:   nil,
			want: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond},
		},
		{
			name: "min equals max",
			rc:   &cloudtaskspb.RetryConfig{MinBackoff: dur(30 * s), MaxBackoff: dur(30 * s)},
			want: []time.Duration{30 * s, 30 * s, 30 * s},
		},
	}
	for _, tt := range tests {
		var got []time.Duration
		for i := range tt.want {
			got = append(got, cloudtasks.RetryDelay(tt.rc, i))
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("RetryDelay(%s) mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
	if got := cloudtasks.RetryDelay(nil, 40); got != time.Hour {
		t.Errorf("RetryDelay(defaults, 40) = %v, want 1h (max_backoff)", got)
	}
	if got := cloudtasks.RetryDelay(nil, 10000); got != time.Hour {
		t.Errorf("RetryDelay(defaults, 10000) = %v, want 1h without overflow", got)
	}
}

// A real dispatch against an always-failing target follows the computed
// schedule and stops after max_attempts, deleting the task.
func TestRetryScheduleDispatch(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	tg := newTarget(t, func(int, hit) int { return http.StatusInternalServerError })
	rc := &cloudtaskspb.RetryConfig{MaxAttempts: 5, MinBackoff: dur(100 * time.Millisecond), MaxBackoff: dur(400 * time.Millisecond), MaxDoublings: 1}
	q := e.queue(t, "retrying", nil, rc)
	created := e.task(t, q, httpTask(q+"/tasks/failing", tg.URL))

	e.waitDeleted(t, created.Name, "deletion after 5 attempts")
	hits := tg.snapshot()
	if len(hits) != 5 {
		t.Fatalf("attempts = %d, want 5 (max_attempts)", len(hits))
	}
	for i, h := range hits {
		if got := h.header.Get(cloudtasks.HeaderRetryCount); got != strconv.Itoa(i) {
			t.Errorf("attempt %d %s = %s, want %d", i+1, cloudtasks.HeaderRetryCount, got, i)
		}
		if i == 0 {
			continue
		}
		if got := h.header.Get(cloudtasks.HeaderPreviousResponse); got != "500" {
			t.Errorf("attempt %d %s = %q, want 500", i+1, cloudtasks.HeaderPreviousResponse, got)
		}
		// Never early: each retry waits at least RetryDelay after the
		// previous failure (arrival times bound it from below up to a
		// millisecond of timestamp noise).
		want := cloudtasks.RetryDelay(rc, i-1)
		if gap := h.at.Sub(hits[i-1].at); gap < want-time.Millisecond {
			t.Errorf("gap before attempt %d = %v, want >= %v", i+1, gap, want)
		}
		eta, _ := strconv.ParseFloat(h.header.Get(cloudtasks.HeaderETA), 64)
		prevETA, _ := strconv.ParseFloat(hits[i-1].header.Get(cloudtasks.HeaderETA), 64)
		if d := time.Duration((eta - prevETA) * 1e9); d < want {
			t.Errorf("ETA step before attempt %d = %v, want >= %v", i+1, d, want)
		}
	}
	// The exhausted task's name stays reserved like any finished task.
	if _, err := e.Client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q, Task: httpTask(created.Name, tg.URL)}); codeOf(err) != codes.AlreadyExists {
		t.Errorf("CreateTask(exhausted name) = %v, want AlreadyExists", err)
	}
}

// max_attempts -1 retries without a count limit until max_retry_duration has
// passed since the first attempt; a task-level retry_config overrides the
// queue's. The fake clock makes the count exact however loaded the machine:
// the service decides when an attempt's answer arrives, and on the fake clock
// no time passes between an attempt and its answer.
func TestRetryUnlimitedUntilDuration(t *testing.T) {
	t.Parallel()
	clock := cloudtasks.NewFakeClock(time.Now())
	e := startEmu(t, cloudtasks.WithClock(clock))
	ctx := context.Background()
	tg := newTarget(t, func(int, hit) int { return http.StatusBadGateway })
	q := e.queue(t, "unlimited", nil, &cloudtaskspb.RetryConfig{MaxAttempts: 2})
	tk := httpTask(q+"/tasks/unlimited", tg.URL)
	tk.RetryConfig = &cloudtaskspb.RetryConfig{MaxAttempts: -1, MaxRetryDuration: dur(10 * time.Minute), MinBackoff: dur(time.Minute), MaxBackoff: dur(time.Minute)}
	e.task(t, q, tk)
	answered := func(n int32) func() bool {
		return func() bool {
			got, err := e.Client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: tk.Name})
			return err == nil && got.ResponseCount == n
		}
	}
	testenv.WaitUntil(t, 10*time.Second, "first attempt answered", answered(1))
	// Attempts at 0, 1, …, 9 minutes answer before the duration has passed:
	// each is retried a minute later, past the queue's max_attempts of 2.
	for n := int32(2); n <= 10; n++ {
		clock.Advance(time.Minute)
		testenv.WaitUntil(t, 10*time.Second, fmt.Sprintf("attempt %d answered", n), answered(n))
	}
	// The attempt at 10 minutes answers once the duration has passed: the
	// task is deleted, not retried.
	clock.Advance(time.Minute)
	e.waitDeleted(t, tk.Name, "deletion after the retry duration")
	if n := tg.count(); n != 11 {
		t.Errorf("attempts = %d, want 11 (one a minute from 0 to 10 minutes)", n)
	}
}
