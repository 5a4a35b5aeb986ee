package classify

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// BenchmarkClassify measures new events through Handle on the Firestore and
// Cloud Tasks emulators, one at a time and with 8 in flight, and reports the
// Firestore document reads and writes per new entry as the store counts them
// on the code path (target: at most 1 read and 3 writes; the policy override
// read, once per refresh interval, is not per entry). Each event has its own
// tenant so breakers stay closed and every entry gets a replay task.
func BenchmarkClassify(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("inflight=%d", par), func(b *testing.B) {
			e := setup(b)
			ctx := testenv.Context(b)
			payload := make([]byte, 1024)
			var seq atomic.Uint64
			next := func() error {
				n := seq.Add(1)
				ev := explicit(n, "llm_provider_timeout", "upstream timed out", msg{payload: payload})
				ev.Tenant = fmt.Sprint("bench-", n)
				return e.h.Handle(ctx, cloudEvent(b, ev))
			}
			before := e.store.Ops()
			start := time.Now()
			b.ResetTimer()
			if par == 1 {
				for i := 0; i < b.N; i++ {
					if err := next(); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := next(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.StopTimer()
			elapsed := time.Since(start)
			ops := e.store.Ops()
			n := float64(seq.Load())
			b.ReportMetric(n/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(ops.Reads-before.Reads)/n, "fs-reads/entry")
			b.ReportMetric(float64(ops.Writes-before.Writes)/n, "fs-writes/entry")
			if got := len(e.emu.Tasks(b, e.queue)); got != int(n) {
				b.Errorf("%d tasks for %d events", got, int(n))
			}
		})
	}
}
