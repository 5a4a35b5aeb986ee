package reconciler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// alertStep is one reconcile run of an alert's life: what the finding
// counts (0: absent) and what has been published of the alert so far.
type alertStep struct {
	name  string
	setup func()
	at    time.Time
	count int
	pub   []string
}

// runAlertSteps runs reconcile once per step, at the step's time, and
// checks the alert's finding and notifications.
func (f *fixture) runAlertSteps(t *testing.T, cfg reconciler.Config, alert string, clock *time.Time, steps []alertStep) {
	t.Helper()
	tp := &alertTopic{}
	deps := reconciler.Deps{Logger: obs.NewLogger(f.logs), Store: f.st, Tasks: f.sched, Notify: notify.New(f.st, tp),
		Now:       func() time.Time { return *clock },
		JetStream: func(context.Context) (jetstream.JetStream, error) { return f.js, nil }}
	cfg.AdvisoryStream, cfg.RecordStream, cfg.WorkStreams, cfg.TimeBudget = advStream, recStream, []string{workStream}, time.Minute
	h := reconciler.New(cfg, deps)
	for _, st := range steps {
		if st.setup != nil {
			st.setup()
		}
		*clock = st.at
		rep := f.run(h, false)
		fs := findings(rep, alert)
		switch {
		case st.count == 0 && len(fs) != 0:
			t.Errorf("%s: %s = %+v, want none", st.name, alert, fs[0])
		case st.count > 0 && (len(fs) != 1 || fs[0].Count != st.count || !fs[0].Alert):
			t.Errorf("%s: %s findings = %d (%s), want one alert counting %d", st.name, alert, len(fs), summary(rep), st.count)
		}
		var pub []string
		for _, p := range tp.published() {
			if strings.HasSuffix(p, " "+alert) {
				pub = append(pub, p)
			}
		}
		if d := cmp.Diff(st.pub, pub); d != "" {
			t.Errorf("%s: %s notifications (-want +got):\n%s", st.name, alert, d)
		}
	}
}

// A work consumer with unlimited deliveries never dead-letters a task
// that keeps failing: one finding, one alert raised, cleared once the
// consumer has a limit.
func TestConsumerNeverGivesUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	if _, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "endless",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1}); err != nil {
		t.Fatal(err)
	}
	// Consumers that give up are fine, and so is one that never acks.
	for _, c := range []jetstream.ConsumerConfig{
		{Durable: "bounded", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3, BackOff: []time.Duration{time.Second, time.Minute}},
		{Durable: "fire-and-forget", AckPolicy: jetstream.AckNonePolicy},
	} {
		if _, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, c); err != nil {
			t.Fatal(err)
		}
	}
	clock := time.Now().UTC()
	raised, cleared := "alert_raised "+audit.AlertConsumerNeverGivesUp, "alert_cleared "+audit.AlertConsumerNeverGivesUp
	f.runAlertSteps(t, reconciler.Config{}, audit.AlertConsumerNeverGivesUp, &clock, []alertStep{
		{name: "unlimited deliveries: raised", at: clock, count: 1, pub: []string{raised}},
		{name: "still: nothing new", at: clock.Add(time.Minute), count: 1, pub: []string{raised}},
		{name: "limited: cleared", setup: func() {
			if _, err := f.js.UpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "endless",
				AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3, BackOff: []time.Duration{time.Second, time.Minute}}); err != nil {
				t.Fatal(err)
			}
		}, at: clock.Add(2 * time.Minute), pub: []string{raised, cleared}},
	})
}

// An agent that swallows errors acknowledges tasks without recording an
// outcome (no completion, no death): the hour's acks exceed its outcomes
// and one alert is raised; the hour after the agent records every outcome
// again, it clears.
func TestAcksWithoutOutcome(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	worker, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "worker", FilterSubject: "agents.backend.>",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3, BackOff: []time.Duration{time.Second, time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	// The triage agent acks its tasks once answered: their outcome is the
	// entry's decision, neither a completion nor a death.
	triageSubject := event.DefaultConventions.TaskSubject("ceo", event.TriageTaskType)
	triager, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "ceo-triage",
		FilterSubject: triageSubject, AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3, BackOff: []time.Duration{time.Second, time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	answer := func(n int) {
		for i := range n {
			if _, err := f.js.Publish(f.ctx, triageSubject, fmt.Appendf(nil, `{"triage":%d}`, i)); err != nil {
				t.Fatal(err)
			}
		}
		batch, err := triager.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if err := m.DoubleAck(f.ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// work publishes n tasks and lets the worker ack them all; completed,
	// when not zero, is when their completions are recorded.
	seq := 0
	work := func(n int, completed time.Time) {
		for range n {
			seq++
			if _, err := f.js.Publish(f.ctx, "agents.backend.tasks.implementation", fmt.Appendf(nil, `{"n":%d}`, seq)); err != nil {
				t.Fatal(err)
			}
			if !completed.IsZero() {
				key := fmt.Sprint("task-", seq)
				rec := agentkit.IdempotencyRecord{Key: key, Tenant: "acme", Status: agentkit.StatusCompleted, Agent: "backend",
					CompletedAt: completed, ExpireAt: completed.Add(72 * time.Hour)}
				if _, err := f.fs.Collection(store.TaskIdempotency).Doc(agentkit.IdempotencyDocID("acme", key)).Set(f.ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
		}
		batch, err := worker.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		acked := 0
		for m := range batch.Messages() {
			if err := m.DoubleAck(f.ctx); err != nil {
				t.Fatal(err)
			}
			acked++
		}
		if acked != n {
			t.Fatalf("acked %d of %d tasks", acked, n)
		}
	}
	hour := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	clock := hour
	raised, cleared := "alert_raised "+audit.AlertAcksWithoutOutcome, "alert_cleared "+audit.AlertAcksWithoutOutcome
	f.runAlertSteps(t, reconciler.Config{CaptureGrace: time.Minute}, audit.AlertAcksWithoutOutcome, &clock, []alertStep{
		{name: "first sample", at: hour.Add(5 * time.Minute)},
		{name: "10 acked, no outcome; the hour not over", setup: func() { work(10, time.Time{}) }, at: hour.Add(35 * time.Minute)},
		{name: "the hour over: raised", at: hour.Add(65 * time.Minute), count: 10, pub: []string{raised}},
		{name: "the agent fixed: 10 acked, 10 completed; 8 triage answers", setup: func() { work(10, hour.Add(70*time.Minute)); answer(8) },
			at: hour.Add(95 * time.Minute), count: 10, pub: []string{raised}},
		{name: "that hour over: cleared", at: hour.Add(125 * time.Minute), pub: []string{raised, cleared}},
	})
}
