package classify

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
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
			next, seq := e.ownTenantEvents(b, ctx, "llm_provider_timeout", "upstream timed out", make([]byte, 1024))
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
			n := float64(seq.Load())
			b.ReportMetric(n/elapsed.Seconds(), "events/s")
			reportOps(b, before, e.store.Ops(), n)
			if got := len(e.emu.Tasks(b, e.queue)); got != int(n) {
				b.Errorf("%d tasks for %d events", got, int(n))
			}
		})
	}
}

// BenchmarkClassifyVsRawTx puts classify next to its physical limit on the
// same emulator in the same run: a bare loop of Firestore transactions
// doing exactly what a new entry costs (read a breaker document; create an
// entry document of the same size; merge-increment a metrics shard; write
// the breaker), with the same number in flight. Events carry a permanent
// reason code so classify, like the loop, makes no Cloud Tasks call: the
// ratio isolates what classify adds (decode, policy, the entry's fields)
// to the storage work. Rounds alternate between the two and the ratio is
// taken from the medians, because the machine is shared and noisy.
//
//	go test ./functions/classify -run '^$' -bench ClassifyVsRawTx -benchtime 600x
func BenchmarkClassifyVsRawTx(b *testing.B) {
	const inflight, rounds = 8, 3
	e := setup(b)
	ctx := testenv.Context(b)
	payload := make([]byte, 1024)
	classifyOne, seq := e.ownTenantEvents(b, ctx, "impossible_task", "the task cannot be done", payload)
	raw := newRawTx(e.fs, payload)
	per := max(1, b.N/rounds)
	var classifyRates, rawRates []float64
	before := e.store.Ops()
	b.ResetTimer()
	for range rounds {
		rawRates = append(rawRates, runInFlight(b, per, inflight, func() error { return raw.one(ctx) }))
		classifyRates = append(classifyRates, runInFlight(b, per, inflight, classifyOne))
	}
	b.StopTimer()
	ops := e.store.Ops()
	slices.Sort(classifyRates)
	slices.Sort(rawRates)
	c, r := classifyRates[rounds/2], rawRates[rounds/2]
	b.ReportMetric(c, "classify-events/s")
	b.ReportMetric(r, "raw-tx/s")
	b.ReportMetric(c/r, "ratio")
	reportOps(b, before, ops, float64(seq.Load()))
}

// ownTenantEvents returns a function that classifies one new explicit
// event with reason per call, each of a tenant of its own so that breakers
// stay closed, and the count of calls.
func (e *env) ownTenantEvents(b *testing.B, ctx context.Context, reason, message string, payload []byte) (func() error, *atomic.Uint64) {
	var seq atomic.Uint64
	return func() error {
		n := seq.Add(1)
		ev := explicit(n, reason, message, msg{payload: payload})
		ev.Tenant = fmt.Sprint("bench-", n)
		return e.h.Handle(ctx, cloudEvent(b, ev))
	}, &seq
}

// reportOps reports the Firestore reads and writes per entry between two
// Ops counts over n new entries (the storage target: 1 read, 3 writes).
func reportOps(b *testing.B, before, after store.Ops, n float64) {
	b.ReportMetric(float64(after.Reads-before.Reads)/n, "fs-reads/entry")
	b.ReportMetric(float64(after.Writes-before.Writes)/n, "fs-writes/entry")
}

// runInFlight runs fn n times with at most inflight calls at once and
// returns the calls per second.
func runInFlight(b *testing.B, n, inflight int, fn func() error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := fn(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// rawTx is the storage work of one new entry without classify around it.
type rawTx struct {
	fs      *firestore.Client
	payload []byte
	prefix  string
	n       atomic.Uint64
}

func newRawTx(fs *firestore.Client, payload []byte) *rawTx {
	return &rawTx{fs: fs, payload: payload, prefix: fmt.Sprint("raw-", time.Now().UnixNano())}
}

func (r *rawTx) one(ctx context.Context) error {
	n := r.n.Add(1)
	now := time.Now().UTC()
	id := fmt.Sprintf("%s-TASKS.%d", r.prefix, n)
	tenant := fmt.Sprint("raw-tenant-", n)
	entry := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(n), Subject: "agents.backend.tasks.code_review",
		Tenant: tenant, Agent: "backend", TaskType: "code_review", Kind: "explicit", Kinds: []string{"explicit"},
		Payload: r.payload, PayloadSize: int64(len(r.payload)), PayloadSHA256: store.PayloadSum(r.payload),
		Category: "permanent", ReasonCode: "impossible_task", Action: "escalate", Status: store.Escalated,
		CreatedAt: now, UpdatedAt: now, ExpireAt: now.Add(store.Retention), RootID: id,
		History: []store.Transition{{At: now, To: string(store.Escalated), By: "raw"}}}
	breaker := r.fs.Collection(r.prefix + "-breakers").Doc(tenant)
	shard := r.fs.Collection(r.prefix + "-metrics").Doc(store.Hour(now)).Collection("shards").Doc(fmt.Sprint(n % 8))
	rollup := r.fs.Collection(r.prefix + "-rollups").Doc(store.Day(now)).Collection("shards").Doc(fmt.Sprint(n % 8))
	inc := firestore.Increment(1)
	return r.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		if _, err := tx.Get(breaker); err != nil && status.Code(err) != codes.NotFound {
			return err
		}
		if err := tx.Create(r.fs.Collection(r.prefix+"-entries").Doc(id), entry); err != nil {
			return err
		}
		if err := tx.Set(shard, map[string]any{"hour": store.Hour(now), "total": inc,
			"by_kind": map[string]any{"explicit": inc}, "by_category": map[string]any{"permanent": inc},
			"by_reason": map[string]any{"impossible_task": inc}, "by_agent": map[string]any{"backend": inc},
			"by_tenant": map[string]any{tenant: inc}, "by_action": map[string]any{"escalate": inc},
			"by_status": map[string]any{"escalated": inc}, "escalated": inc}, firestore.MergeAll); err != nil {
			return err
		}
		hh := now.Format("15")
		if err := tx.Set(rollup, map[string]any{"day": store.Day(now), "hours": map[string]any{hh: map[string]any{"total": inc,
			"by_category": map[string]any{"permanent": inc}, "statuses": map[string]any{"escalated": inc}}}}, firestore.MergeAll); err != nil {
			return err
		}
		return tx.Set(breaker, map[string]any{"state": "closed", "failures": []time.Time{now}, "updated_at": now})
	})
}

// blackhole is a notification destination that never answers (a host that
// drops packets): a publish returns only when its context ends.
type blackhole struct{}

func (blackhole) Publish(ctx context.Context, _ []byte, _ map[string]string) error {
	<-ctx.Done()
	return ctx.Err()
}

func (blackhole) tasks(ctx context.Context) (notify.Tasks, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// BenchmarkClassifyNotificationsDown measures what an outage of the whole
// notification path (the Pub/Sub topic and the triage agent's stream both
// unreachable, never answering) adds to each event classify captures. Every
// event escalates, so each commit stages a notification with a triage task.
// Rounds alternate between classify without notifications and classify
// with the flusher it runs in production (notify.AfterCommitOptions: the
// post-commit budget and the pause after a failure); added-ms/event is the
// difference of the medians. pause=off shows the same outage without the
// pause: every event then waits the whole budget.
//
//	go test ./functions/classify -run '^$' -bench NotificationsDown -benchtime 300x
func BenchmarkClassifyNotificationsDown(b *testing.B) {
	for _, pause := range []time.Duration{config.DefaultPauseAfterFailure, 0} {
		name := "pause=" + pause.String()
		if pause == 0 {
			name = "pause=off"
		}
		b.Run(name, func(b *testing.B) {
			const rounds = 3
			e := setup(b)
			ctx := testenv.Context(b)
			cfg := config.Notifications{AfterCommitBudget: config.DefaultAfterCommitBudget, PauseAfterFailure: pause}
			down := notify.New(e.store, blackhole{}, append(notify.AfterCommitOptions(cfg), notify.WithTasks(blackhole{}.tasks))...)
			quiet := New(Config{}, Deps{Logger: obs.Discard(), Store: e.store, Policy: e.policy, Scheduler: e.sched, Now: e.clock.Now})
			loud := New(Config{}, Deps{Logger: obs.Discard(), Store: e.store, Policy: e.policy, Scheduler: e.sched, Now: e.clock.Now, Notify: down})
			var seq atomic.Uint64
			one := func(h *Handler) (time.Duration, error) {
				n := seq.Add(1)
				ev := explicit(n, "impossible_task", "the task cannot be done", msg{payload: make([]byte, 1024)})
				ev.Tenant = fmt.Sprint("bench-", n)
				start := time.Now()
				err := h.Handle(ctx, cloudEvent(b, ev))
				return time.Since(start), err
			}
			per := max(1, b.N/rounds)
			var quietMs, loudMs []float64
			var first time.Duration
			b.ResetTimer()
			for r := range rounds {
				for _, h := range []*Handler{quiet, loud} {
					var sum time.Duration
					for i := range per {
						d, err := one(h)
						if err != nil {
							b.Fatal(err)
						}
						if h == loud && r == 0 && i == 0 {
							first = d
						}
						sum += d
					}
					ms := float64(sum.Microseconds()) / 1000 / float64(per)
					if h == quiet {
						quietMs = append(quietMs, ms)
					} else {
						loudMs = append(loudMs, ms)
					}
				}
			}
			b.StopTimer()
			slices.Sort(quietMs)
			slices.Sort(loudMs)
			b.ReportMetric(quietMs[rounds/2], "ms/event-without")
			b.ReportMetric(loudMs[rounds/2], "ms/event-down")
			b.ReportMetric(loudMs[rounds/2]-quietMs[rounds/2], "added-ms/event")
			b.ReportMetric(float64(first.Microseconds())/1000, "first-down-event-ms")
		})
	}
}
