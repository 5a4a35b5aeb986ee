package cloudtasks_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/internal/testenv"
)

// BenchmarkDispatchLateness schedules b.N tasks 2 ms apart (within the
// default 500/s rate) and reports how late each reached the target after its
// schedule time (or after the queue was resumed, if that was later).
func BenchmarkDispatchLateness(b *testing.B) {
	e := startEmu(b)
	tg := newTarget(b, nil)
	q := e.queue(b, fmt.Sprintf("bench-%d", b.N), nil, nil)
	e.pause(b, q)
	base := time.Now().Add(200*time.Millisecond + time.Duration(b.N)*500*time.Microsecond)
	var tasks []*cloudtaskspb.Task
	for i := 0; i < b.N; i++ {
		tk := httpTask("", tg.URL)
		tk.ScheduleTime = timestamppb.New(base.Add(time.Duration(i) * 2 * time.Millisecond))
		tasks = append(tasks, tk)
	}
	createConcurrently(b, e, q, tasks)
	b.ResetTimer()
	resumed := time.Now()
	e.resume(b, q)
	testenv.WaitUntil(b, 5*time.Minute, "all dispatches", func() bool { return tg.count() >= b.N })
	b.StopTimer()

	var late []float64
	for _, h := range tg.snapshot() {
		eta, err := strconv.ParseFloat(h.header.Get(cloudtasks.HeaderETA), 64)
		if err != nil {
			b.Fatalf("bad %s: %v", cloudtasks.HeaderETA, err)
		}
		due := time.Unix(0, int64(eta*1e9))
		if due.Before(resumed) {
			due = resumed
		}
		late = append(late, float64(h.at.Sub(due).Microseconds())/1000)
	}
	slices.Sort(late)
	pct := func(p float64) float64 { return late[min(len(late)-1, int(p*float64(len(late))))] }
	b.ReportMetric(pct(0.50), "p50-late-ms")
	b.ReportMetric(pct(0.99), "p99-late-ms")
	b.ReportMetric(late[len(late)-1], "max-late-ms")
}
