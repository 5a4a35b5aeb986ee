package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// rollupWorld is a store on a clock and the entries it recorded, with the
// means to move them and to count the day rollups against them.
type rollupWorld struct {
	t   *testing.T
	ctx context.Context
	c   *testenv.Clock
	s   *store.Store
	n   int
	// from is the first hour the test recorded in.
	from time.Time
}

func newRollupWorld(t *testing.T) *rollupWorld {
	// 22:40, so a few hours later the entries' day has ended.
	c := testenv.NewClock(time.Date(2026, 11, 20, 22, 40, 0, 0, time.UTC))
	ctx, _, s := newStore(t, store.WithClock(c.Now), lenientBreaker)
	return &rollupWorld{t: t, ctx: ctx, c: c, s: s, from: c.Now().Truncate(time.Hour)}
}

// record records an entry of tenant in st with category cat.
func (w *rollupWorld) record(tenant, cat string, st store.Status) string {
	w.t.Helper()
	w.n++
	id := fmt.Sprintf("TASKS.%d", w.n)
	e := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(w.n), Tenant: tenant, Agent: "writer", Kind: "explicit",
		Subject: "agents.writer.tasks.report", Category: cat, ReasonCode: "timeout", Action: "auto_replay", Status: st, Payload: []byte("x")}
	if _, err := w.s.Record(w.ctx, e, "classify"); err != nil {
		w.t.Fatalf("Record(%s) = %v", id, err)
	}
	return id
}

func (w *rollupWorld) move(id string, from, to store.Status) {
	w.t.Helper()
	if _, err := w.s.Transition(w.ctx, id, store.Change{From: []store.Status{from}, To: to, By: "test"}); err != nil {
		w.t.Fatalf("Transition(%s, %s -> %s) = %v", id, from, to, err)
	}
}

// hours is how many hours the world has run through (the current one
// included).
func (w *rollupWorld) hours() int {
	return int(w.c.Now().Truncate(time.Hour).Sub(w.from)/time.Hour) + 1
}

// rows are the day rollups' rows of the world's hours.
func (w *rollupWorld) rows() []store.Rollup {
	w.t.Helper()
	rows, err := w.s.HourlyRollups(w.ctx, w.from, w.hours())
	if err != nil {
		w.t.Fatalf("HourlyRollups() = %v", err)
	}
	return rows
}

// counted is what the rows must hold, counted from the entries themselves
// (every entry read, by the hour of its creation: its category and its
// status now; by the hour of each move of its history: the resolution
// counters), independently of the store's counters.
func (w *rollupWorld) counted() []store.Rollup {
	w.t.Helper()
	out := make([]store.Rollup, w.hours())
	for i := range out {
		out[i].Hour = store.Hour(w.from.Add(time.Duration(i) * time.Hour))
	}
	var all []*store.Entry
	defer func() {
		for i := range out {
			out[i].Outcomes = store.RecountOutcomes(all)[out[i].Hour].Normalized()
		}
	}()
	q := store.Query{View: store.ScanView, Order: store.OldestFirst, Limit: 100}
	for {
		p, err := w.s.Entries(w.ctx, q)
		if err != nil {
			w.t.Fatal(err)
		}
		all = append(all, p.Entries...)
		for _, e := range p.Entries {
			r := &out[int(e.CreatedAt.Truncate(time.Hour).Sub(w.from)/time.Hour)]
			r.Total++
			add := func(m *map[string]int64, k string) {
				if *m == nil {
					*m = map[string]int64{}
				}
				(*m)[k]++
			}
			add(&r.ByCategory, e.Category)
			add(&r.Statuses, string(e.Status))
		}
		if p.Next.IsZero() {
			return out
		}
		q.After = p.Next
	}
}

// agrees fails the test when the rows do not count what the entries say.
func (w *rollupWorld) agrees(when string) {
	w.t.Helper()
	if diff := cmp.Diff(w.counted(), w.rows(), cmpopts.IgnoreFields(store.Rollup{}, "Streams", "Published"), cmpopts.EquateEmpty()); diff != "" {
		w.t.Errorf("%s: the day rollups differ from a recount of the entries (-recount +rollups):\n%s", when, diff)
	}
}

// The day rollups equal a recount of the entries after the moves every
// path makes: classify's Record (a new entry, held by an open breaker, a
// redelivery, the other capture path naming the tenant), replay's claim,
// publish and recovery, an operator's approval and discard, reconcile's
// requeue, across the end of a day (moves of the day before then write the
// closed day's rollup). The store's own recount (RecountHour) agrees with
// every hour, rows included.
func TestRollupsEqualRecount(t *testing.T) {
	w := newRollupWorld(t)
	var ids []string
	for i := range 12 {
		st := []store.Status{store.Scheduled, store.Scheduled, store.AwaitingApproval, store.Escalated}[i%4]
		ids = append(ids, w.record([]string{"acme", "globex"}[i%2], []string{"transient", "permanent", "poison"}[i%3], st))
		w.c.Add(7 * time.Minute)
	}
	// An advisory without its message, then its explicit record naming
	// the tenant: the entry moves between tenants, not statuses.
	w.n++
	adv := fmt.Sprintf("TASKS.%d", w.n)
	if _, err := w.s.Record(w.ctx, &store.Entry{ID: adv, EventID: adv, Stream: "TASKS", StreamSeq: int64(w.n), Tenant: "default", Kind: "max_deliver",
		Category: "transient", Status: store.Scheduled, PayloadMissing: true}, "classify"); err != nil {
		t.Fatal(err)
	}
	res, err := w.s.Record(w.ctx, &store.Entry{ID: adv, EventID: adv, Stream: "TASKS", StreamSeq: int64(w.n), Tenant: "acme", Kind: "explicit",
		Subject: "agents.writer.tasks.report", Headers: map[string][]string{"X-Tenant-Id": {"acme"}}, Category: "transient", Status: store.Scheduled, Payload: []byte("x")}, "classify")
	if err != nil || res.Retenanted != "default" {
		t.Fatalf("the explicit record = %+v, %v; want the entry moved from tenant default", res, err)
	}
	w.agrees("after classify")
	w.c.Add(2 * time.Hour) // the next day
	for _, id := range []string{ids[0], ids[4], ids[8]} {
		w.move(id, store.Scheduled, store.Replaying)
		w.move(id, store.Replaying, store.Replayed)
	}
	if _, err := w.s.MarkRecovered(w.ctx, ids[0], []store.Status{store.Replayed}, "reconcile", "completed"); err != nil {
		t.Fatal(err)
	}
	w.move(ids[1], store.Scheduled, store.Replaying)
	w.move(ids[1], store.Replaying, store.Scheduled) // reconcile requeues a stuck replay
	w.move(ids[2], store.AwaitingApproval, store.Scheduled)
	w.move(ids[3], store.Escalated, store.Discarded)
	w.record("acme", "transient", store.Quarantined)
	w.agrees("after replay, recovery, requeue, approval, discard")
	for h := range w.hours() {
		hr, err := w.s.RecountHour(w.ctx, w.from.Add(time.Duration(h)*time.Hour), 5, true)
		if err != nil || !hr.Agreed {
			t.Errorf("RecountHour(%s) = agreed %v, %v; stored %+v, row %+v", store.Hour(w.from.Add(time.Duration(h)*time.Hour)), hr.Agreed, err, hr.Stored, hr.Rollup)
		}
	}
}

// A crash between steps never makes the rollups count twice or miss a
// move. Where the counters move in the same transaction as the entry, a
// transaction that fails after it staged them changes neither, and a
// retried function finds the entry moved and counts nothing again; a count
// written outside an entry's transaction (a stray, a hand edit) is drift,
// which reconcile's recount (RecountHour) repairs.
func TestRollupsSurviveCrashes(t *testing.T) {
	tests := []struct {
		name string
		// how holds the rollups to the entries: "transaction" or
		// "recount".
		how  string
		step func(w *rollupWorld, id string) error
	}{
		{"a transaction fails after staging its counters", "transaction", func(w *rollupWorld, id string) error {
			// The approval's edit makes the entry too large: the
			// transaction has staged the move's counters, then fails.
			_, err := w.s.TransitionScoped(w.ctx, id, store.AllTenants, store.Change{From: []store.Status{store.AwaitingApproval}, To: store.Scheduled, By: "ops", Note: store.ApprovalNote},
				&store.Edit{Headers: map[string]string{"X-Big": strings.Repeat("x", 1_100_000)}, By: "ops"})
			if !errors.Is(err, store.ErrTooLarge) {
				return fmt.Errorf("the edit = %v, want ErrTooLarge", err)
			}
			e, err := w.s.GetMeta(w.ctx, id)
			if err != nil || e.Status != store.AwaitingApproval {
				return fmt.Errorf("the entry after the failed approval = %+v, %v; want it still awaiting approval", e, err)
			}
			return nil
		}},
		{"classify's event is delivered again", "transaction", func(w *rollupWorld, id string) error {
			res, err := w.s.Record(w.ctx, &store.Entry{ID: id, EventID: id, Stream: "TASKS", Tenant: "acme", Kind: "explicit", Category: "transient", Status: store.Scheduled, Payload: []byte("x")}, "classify")
			if err != nil || res.Created {
				return fmt.Errorf("the redelivery = %+v, %v; want the entry found, not created", res, err)
			}
			return nil
		}},
		{"a replay retried after its move", "transaction", func(w *rollupWorld, id string) error {
			w.move(id, store.AwaitingApproval, store.Scheduled)
			w.move(id, store.Scheduled, store.Replaying)
			w.move(id, store.Replaying, store.Replayed)
			for range 2 { // Cloud Tasks delivers the task again
				if _, err := w.s.MarkRecovered(w.ctx, id, []store.Status{store.Replayed}, "replay", "completed"); err != nil {
					return err
				}
			}
			return nil
		}},
		{"an operator's discard sent twice", "transaction", func(w *rollupWorld, id string) error {
			w.move(id, store.AwaitingApproval, store.Discarded)
			_, err := w.s.Transition(w.ctx, id, store.Change{From: []store.Status{store.AwaitingApproval}, To: store.Discarded, By: "ops"})
			if !errors.Is(err, store.ErrWrongStatus) {
				return fmt.Errorf("the second discard = %v, want ErrWrongStatus", err)
			}
			return nil
		}},
		{"a count written outside the transactions", "recount", func(w *rollupWorld, id string) error {
			stray := store.Metrics{Total: 1, ByCategory: map[string]int64{"transient": 1}}
			if err := w.s.AddMetrics(w.ctx, w.c.Now(), "stray", stray); err != nil {
				return err
			}
			hr, err := w.s.RecountHour(w.ctx, w.c.Now(), 50, false)
			if err != nil || !hr.Rewritten {
				return fmt.Errorf("the recount = rewritten %v, %v; want the hour and its row rewritten", hr.Rewritten, err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newRollupWorld(t)
			w.record("acme", "transient", store.Scheduled)
			id := w.record("acme", "permanent", store.AwaitingApproval)
			before := w.rows()
			if err := tt.step(w, id); err != nil {
				t.Fatal(err)
			}
			// In every case the rollups count what the entries say,
			// held there by tt.how.
			w.agrees(tt.name + " (held by the " + tt.how + ")")
			if tt.name == "a transaction fails after staging its counters" || tt.name == "classify's event is delivered again" {
				if diff := cmp.Diff(before, w.rows()); diff != "" {
					t.Errorf("the rollups changed (-before +after):\n%s", diff)
				}
			}
		})
	}
}

// A closed day's shards fold into one document: the rows, the streams'
// samples included, stay what they were; a day with one shard is left
// alone.
func TestCompactDay(t *testing.T) {
	w := newRollupWorld(t)
	for i := range 30 {
		w.record(fmt.Sprintf("t%d", i%3), "transient", []store.Status{store.Scheduled, store.Escalated}[i%2])
	}
	if err := w.s.RecordSample(w.ctx, w.c.Now(), store.MetricsSample{Stream: "TASKS", FirstAt: w.c.Now(), LastAt: w.c.Now(), FirstLastSeq: 10, LastSeq: 90}); err != nil {
		t.Fatal(err)
	}
	before := w.rows()
	w.c.Add(2 * time.Hour)
	for i, want := range []bool{true, false} {
		got, err := w.s.CompactDay(w.ctx, w.from)
		if err != nil || got != want {
			t.Fatalf("CompactDay() #%d = %v, %v; want %v", i+1, got, err, want)
		}
	}
	after := w.rows()[:len(before)]
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("rows after the fold (-before +after):\n%s", diff)
	}
	if before[0].Streams["TASKS"] != (store.StreamSpan{First: 10, Last: 90}) {
		t.Errorf("row %s streams = %v, want TASKS 10..90", before[0].Hour, before[0].Streams)
	}
	w.agrees("after the fold")
}

// The recovery counts of a window are its rows' statuses now: the entries
// created in it that settled, and how many of them recovered; those still
// pending or waiting, and those created before it, do not count.
func TestRollupRecovery(t *testing.T) {
	w := newRollupWorld(t)
	w.record("t", "transient", store.Recovered) // before the window
	w.c.Add(time.Hour)
	from := w.c.Now().Truncate(time.Hour)
	for _, st := range []store.Status{store.Recovered, store.Recovered, store.Recovered, store.Escalated, store.Discarded, store.Quarantined,
		store.Scheduled, store.Held, store.AwaitingApproval, store.Replayed} {
		w.record("t", "transient", st)
		w.c.Add(time.Minute)
	}
	rows, err := w.s.HourlyRollups(w.ctx, from, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rows[0].Recovery(), (store.Recovery{Recovered: 3, Settled: 6}); got != want || got.Rate() != 0.5 {
		t.Errorf("Recovery() = %+v (rate %v), want %+v (rate 0.5)", got, got.Rate(), want)
	}
	if got := rows[0].InStatus(store.AwaitingApproval, store.Held); got != 2 {
		t.Errorf("InStatus(awaiting approval, held) = %d, want 2", got)
	}
}
