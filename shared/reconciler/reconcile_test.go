package reconciler_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// repairable seeds one state per repairable finding and returns what the
// test checks afterwards.
type repairable struct {
	advisorySeq      uint64
	missing          string // scheduled, task never created
	reserved         string // scheduled, its task name used up (deleted)
	orphanNoEntry    string // task of an entry that does not exist
	orphanEscalated  string // task of an escalated entry
	escalatedEntry   string
	stuck            string
	breakerTenant    string
	driftHour        string
	driftRecount     int64
	replayedDone     string
	healthyScheduled string // scheduled with its task: no finding
}

func seedRepairable(f *fixture) repairable {
	t := f.t
	now := time.Now().UTC()
	old := f.storeAt(now.Add(-10 * time.Minute))
	var s repairable

	// An advisory whose message never got an entry (the bridge or classify
	// lost it).
	s.advisorySeq = 77
	f.advisory(s.advisorySeq)

	// A scheduled entry whose task was never created.
	s.missing = f.seed(old, entry(1, "acme", store.Scheduled)).ID

	// A scheduled entry whose task ran or was deleted: the name is spent.
	e := f.seed(old, entry(2, "acme", store.Scheduled))
	s.reserved = e.ID
	if _, _, err := f.sched.Schedule(f.ctx, tasks.Request{EntryID: e.ID, Attempt: 1, At: e.NextRetryAt}); err != nil {
		t.Fatal(err)
	}
	if err := f.sched.Delete(f.ctx, e.TaskName); err != nil {
		t.Fatal(err)
	}

	// A healthy scheduled entry with its task: must stay untouched.
	e = f.seed(old, entry(3, "acme", store.Scheduled))
	s.healthyScheduled = e.ID
	if _, _, err := f.sched.Schedule(f.ctx, tasks.Request{EntryID: e.ID, Attempt: 1, At: e.NextRetryAt}); err != nil {
		t.Fatal(err)
	}

	// Orphans: a task whose entry does not exist, and one whose entry was
	// escalated meanwhile.
	s.orphanNoEntry = tasks.Name("TASKS.999", 1)
	if _, _, err := f.sched.Schedule(f.ctx, tasks.Request{EntryID: "TASKS.999", Attempt: 1, At: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	e = f.seed(old, entry(4, "ops", store.Scheduled))
	s.escalatedEntry = e.ID
	s.orphanEscalated = e.TaskName
	if _, _, err := f.sched.Schedule(f.ctx, tasks.Request{EntryID: e.ID, Attempt: 1, At: e.NextRetryAt}); err != nil {
		t.Fatal(err)
	}
	f.move(old, e.ID, store.Scheduled, store.Replaying, "replay")
	f.move(old, e.ID, store.Replaying, store.Escalated, "replay")

	// An entry replaying for an hour whose task is gone.
	hourAgo := f.storeAt(now.Add(-time.Hour))
	e = f.seed(hourAgo, entry(5, "acme", store.Scheduled))
	s.stuck = e.ID
	f.move(hourAgo, e.ID, store.Scheduled, store.Replaying, "replay")

	// A breaker open for 20 minutes (past the 15 minute cooldown, not yet
	// the 30 minute tenant alert).
	s.breakerTenant = "brk"
	opener := f.storeAt(now.Add(-20*time.Minute), store.BreakerConfig{Threshold: 1, Window: time.Hour, Cooldown: 15 * time.Minute})
	f.seed(opener, entry(6, s.breakerTenant, store.Escalated))

	// A closed hour whose metrics count one entry too many.
	twoHoursAgo := now.Add(-2 * time.Hour).Truncate(time.Hour).Add(10 * time.Minute) // both entries in one hour
	f.seed(f.storeAt(twoHoursAgo), entry(7, "acme", store.Recovered))
	f.seed(f.storeAt(twoHoursAgo.Add(time.Second)), entry(8, "acme", store.Recovered))
	s.driftHour, s.driftRecount = store.Hour(twoHoursAgo), 2
	if err := f.st.AddMetrics(f.ctx, twoHoursAgo, "stray", store.Metrics{Total: 1, ByTenant: map[string]int64{"acme": 1}, ByKind: map[string]int64{"max_deliver": 1}}); err != nil {
		t.Fatal(err)
	}

	// A replayed entry whose task completed afterwards.
	e = f.seed(old, entry(9, "acme", store.Scheduled))
	s.replayedDone = e.ID
	f.move(old, e.ID, store.Scheduled, store.Replaying, "replay")
	f.move(old, e.ID, store.Replaying, store.Replayed, "replay")
	f.complete(e.Tenant, e.IdempotencyKey)
	return s
}

func TestFindingsReportedRepairedAndGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	s := seedRepairable(f)
	cfg := reconciler.Config{CaptureGrace: time.Nanosecond, TimeBudget: time.Minute}
	h := f.handler(cfg, nil)
	tasksBefore := f.queueTasks()
	advBefore := f.lastMsg(advStream).Sequence
	metricsBefore, err := f.st.ReadMetrics(f.ctx, s.driftHour)
	if err != nil {
		t.Fatal(err)
	}

	wantFindings := map[string]string{ // name -> an example it must list
		audit.AlertAdvisoryEntryMismatch: event.ID(workStream, s.advisorySeq),
		audit.AlertMissingTask:           s.missing,
		audit.AlertOrphanTask:            s.orphanNoEntry,
		audit.AlertStuckReplaying:        s.stuck,
		audit.AlertBreakerOpenTooLong:    s.breakerTenant,
		audit.AlertMetricDrift:           s.driftHour,
		audit.FindingReplayedCompleted:   s.replayedDone,
	}
	check := func(rep *audit.Report, dry bool) {
		t.Helper()
		if rep.DryRun != dry || rep.RunID == "" || rep.Schema != audit.Schema {
			t.Errorf("report header = %q %q dry=%v, want schema, run id and dry=%v", rep.Schema, rep.RunID, rep.DryRun, dry)
		}
		for name, example := range wantFindings {
			fd := finding(t, rep, name)
			if !slices.ContainsFunc(fd.Examples, func(x string) bool { return strings.HasPrefix(x, example) }) {
				t.Errorf("%s examples = %v, want one starting with %q", name, fd.Examples, example)
			}
			if fd.Repair == nil {
				t.Fatalf("%s has no repair", name)
			}
			if dry && fd.Repair.Done != 0 {
				t.Errorf("dry run: %s repairs done = %d, want 0", name, fd.Repair.Done)
			}
			if !dry && (fd.Repair.Done != fd.Repair.Planned || fd.Repair.Failed != 0) {
				t.Errorf("%s repair = %+v, want every planned repair done", name, fd.Repair)
			}
			if wantAlert := name != audit.FindingReplayedCompleted; fd.Alert != wantAlert {
				t.Errorf("%s alert = %v, want %v", name, fd.Alert, wantAlert)
			}
		}
		if fd := finding(t, rep, audit.AlertMissingTask); fd.Count != 2 || fd.Repair.Planned != 2 {
			t.Errorf("missing_task = %+v, want the never-created and the spent task", fd)
		}
		if fd := finding(t, rep, audit.AlertOrphanTask); fd.Count != 2 || !slices.Contains(fd.Examples, s.orphanEscalated) {
			t.Errorf("orphan_task = %+v, want %s and %s", fd, s.orphanNoEntry, s.orphanEscalated)
		}
		if len(rep.Findings) != len(wantFindings) {
			t.Errorf("findings: %s; want exactly %d", summary(rep), len(wantFindings))
		}
	}

	// Dry run: everything reported, nothing changed.
	dry := f.run(h, true)
	check(dry, true)
	if got := f.queueTasks(); !slices.Equal(got, tasksBefore) {
		t.Errorf("dry run changed the queue: %v, was %v", got, tasksBefore)
	}
	if got := f.lastMsg(advStream).Sequence; got != advBefore {
		t.Errorf("dry run re-drove an advisory (last seq %d, was %d)", got, advBefore)
	}
	for id, want := range map[string]store.Status{s.stuck: store.Replaying, s.replayedDone: store.Replayed, s.missing: store.Scheduled} {
		if got := f.get(id).Status; got != want {
			t.Errorf("dry run: entry %s is %s, want %s", id, got, want)
		}
	}
	if b := f.breakerDoc(s.breakerTenant); b.State != store.BreakerOpen {
		t.Errorf("dry run: breaker is %s, want still open", b.State)
	}
	if m, _ := f.st.ReadMetrics(f.ctx, s.driftHour); m.Total != metricsBefore.Total {
		t.Errorf("dry run rewrote metrics: total %d, was %d", m.Total, metricsBefore.Total)
	}
	if got := f.logs.alerts(t); len(got) != len(dry.Alerts) {
		t.Errorf("dry run logged alerts %v, want one per alert finding %v", got, dry.Alerts)
	}

	// Real run: everything reported and repaired.
	rep := f.run(h, false)
	check(rep, false)

	// The never-created task is back under its own name; the spent name
	// was replaced by attempt 2 on the entry and in the queue.
	q := f.queueTasks()
	for _, want := range []string{tasks.Name(s.missing, 1), tasks.Name(s.reserved, 2), tasks.Name(s.healthyScheduled, 1), tasks.Name(s.stuck, 2)} {
		if !slices.Contains(q, want) {
			t.Errorf("queue %v lacks %s", q, want)
		}
	}
	for _, gone := range []string{s.orphanNoEntry, s.orphanEscalated} {
		if slices.Contains(q, gone) {
			t.Errorf("orphan %s still in the queue", gone)
		}
	}
	if len(q) != 4 {
		t.Errorf("queue = %v, want exactly the four tasks of scheduled entries", q)
	}
	if e := f.get(s.reserved); e.Status != store.Scheduled || e.TaskName != tasks.Name(s.reserved, 2) {
		t.Errorf("entry with a spent task name = %s %s, want scheduled under attempt 2", e.Status, e.TaskName)
	}
	if e := f.get(s.stuck); e.Status != store.Scheduled || e.TaskName != tasks.Name(s.stuck, 2) {
		t.Errorf("stuck entry = %s %s, want scheduled under attempt 2", e.Status, e.TaskName)
	}
	if e := f.get(s.replayedDone); e.Status != store.Recovered {
		t.Errorf("replayed entry with a completion record is %s, want recovered", e.Status)
	}
	if e := f.get(s.escalatedEntry); e.Status != store.Escalated {
		t.Errorf("escalated entry of the orphan task is %s, want it untouched", e.Status)
	}
	if b, err := f.st.GetBreaker(f.ctx, s.breakerTenant); err != nil || b.State != store.BreakerHalfOpen {
		t.Errorf("breaker = %+v, %v; want half_open", b, err)
	}
	if m, err := f.st.ReadMetrics(f.ctx, s.driftHour); err != nil || m.Total != s.driftRecount || m.ByTenant["acme"] != s.driftRecount ||
		m.ByStatus["recovered"] != s.driftRecount || m.ByReason["timeout"] != s.driftRecount || m.StreamSeqMax[workStream] != 8 {
		t.Errorf("metrics of %s = %+v (%v), want every counter recounted from its %d entries", s.driftHour, m, err, s.driftRecount)
	}
	// The advisory was published again under a re-drive id, so the bridge
	// forwards it again with the same event id.
	last := f.lastMsg(advStream)
	if last.Sequence != advBefore+1 || !strings.HasPrefix(last.Header.Get(jetstream.MsgIDHeader), reconciler.RedrivePrefix) {
		t.Fatalf("advisory stream last = seq %d id %q, want a re-drive at %d", last.Sequence, last.Header.Get(jetstream.MsgIDHeader), advBefore+1)
	}
	if !strings.Contains(string(last.Data), `"stream_seq":77`) {
		t.Errorf("re-driven advisory = %s, want the original", last.Data)
	}
	// The bridge and classify turn the re-driven advisory into the entry
	// (their own tests cover that); here the entry is recorded as classify
	// would, so the next run sees the pipeline caught up.
	f.seed(f.st, entry(s.advisorySeq, "acme", store.Recovered))

	// A second run on the repaired state finds nothing.
	again := f.run(h, false)
	if len(again.Findings) != 0 || len(again.Alerts) != 0 {
		t.Errorf("second run findings: %s", summary(again))
	}
	if !again.Complete {
		t.Errorf("second run not complete: %+v", again.Sections)
	}

	// The report is stored under its run id.
	snap, err := f.fs.Collection(store.Audits).Doc(rep.RunID).Get(f.ctx)
	if err != nil {
		t.Fatalf("stored report %s: %v", rep.RunID, err)
	}
	if got := snap.Data()["run_id"]; got != rep.RunID {
		t.Errorf("stored report run_id = %v, want %s", got, rep.RunID)
	}
	if alerts, ok := snap.Data()["alerts"].([]any); !ok || len(alerts) != len(rep.Alerts) {
		t.Errorf("stored alerts = %v, want %v", snap.Data()["alerts"], rep.Alerts)
	}
}

func TestTenantAlerts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	now := time.Now().UTC()
	recent := f.storeAt(now.Add(-5 * time.Minute))
	seq := uint64(100)
	next := func() uint64 { seq++; return seq }

	// poisoner: 4 poison entries in the last hour (more than 3).
	for range 4 {
		e := entry(next(), "poisoner", store.Quarantined)
		e.Category, e.ReasonCode, e.Action = "poison", "schema_invalid", "quarantine"
		f.seed(recent, e)
	}
	// loud: 8 of the last hour's 13 entries (more than 40 %).
	for range 8 {
		f.seed(recent, entry(next(), "loud", store.Recovered))
	}
	f.seed(recent, entry(next(), "quiet", store.Recovered))
	// flaky: 1 of 5 settled entries recovered in the window (under 80 %),
	// three hours ago so the last hour's shares stay as above.
	earlier := f.storeAt(now.Add(-3 * time.Hour))
	f.seed(earlier, entry(next(), "flaky", store.Recovered))
	for range 4 {
		f.seed(earlier, entry(next(), "flaky", store.Escalated))
	}
	// stuck: a breaker that opened 40 minutes ago and never closed.
	opener := f.storeAt(now.Add(-40*time.Minute), store.BreakerConfig{Threshold: 1, Window: time.Hour, Cooldown: 15 * time.Minute})
	f.seed(opener, entry(next(), "stuck", store.Escalated))

	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	want := map[string]string{
		audit.AlertTenantPoisonBurst:     "poisoner",
		audit.AlertTenantDominates:       "loud",
		audit.AlertTenantRecoveryBelow80: "flaky",
		audit.AlertTenantBreakerOpen30m:  "stuck",
	}
	for i, dry := range []bool{true, false, false} {
		f.logs.reset()
		rep := f.run(h, dry)
		for name, tenant := range want {
			fd := finding(t, rep, name)
			if fd.Tenant != tenant || fd.Severity == "" || !fd.Alert || fd.Repair != nil {
				t.Errorf("run %d: %s = %+v, want an alert for tenant %s without repair", i, name, fd, tenant)
			}
		}
		// Only the tenants named above cross a threshold.
		for _, fd := range rep.Findings {
			if _, ok := want[fd.Name]; !ok && fd.Name != audit.AlertBreakerOpenTooLong {
				t.Errorf("run %d: unexpected finding %s for %q", i, fd.Name, fd.Tenant)
			}
		}
		// One ERROR log entry per alert finding, named by jsonPayload.alert.
		logged := f.logs.alerts(t)
		var wantLogged []string
		for _, fd := range rep.Findings {
			if fd.Alert {
				wantLogged = append(wantLogged, fd.Name)
			}
		}
		slices.Sort(logged)
		slices.Sort(wantLogged)
		if !slices.Equal(logged, wantLogged) {
			t.Errorf("run %d: logged alerts %v, want %v", i, logged, wantLogged)
		}
		health := map[string]*audit.TenantHealth{}
		for _, th := range rep.Tenants {
			health[th.Tenant] = th
		}
		if th := health["flaky"]; th == nil || th.Settled != 5 || th.Recovered != 1 || th.RecoveryRate != 0.2 {
			t.Errorf("run %d: flaky health = %+v, want 1 of 5 recovered", i, th)
		}
		if th := health["poisoner"]; th == nil || th.PoisonLastHr != 4 || th.ActivePoison != 4 {
			t.Errorf("run %d: poisoner health = %+v, want 4 active poison entries in the last hour", i, th)
		}
		if th := health["stuck"]; th == nil || th.Breaker == "" {
			t.Errorf("run %d: stuck health = %+v, want its breaker state", i, th)
		}
	}
	// The first real run half-opened the breaker (open 40 > 15 minutes); the
	// tenant alert stays, since the breaker has not closed.
	if b := f.breakerDoc("stuck"); b.State != store.BreakerHalfOpen {
		t.Errorf("breaker of stuck = %s, want half_open", b.State)
	}
}

// Held entries go back to scheduled once their tenant's breaker admits
// them: all of them when it is closed, exactly one probe when it is
// half-open, none while it is open.
func TestHeldEntriesReleasedAsTheBreakerAdmits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	now := time.Now().UTC()
	cool := store.BreakerConfig{Threshold: 1, Window: time.Hour, Cooldown: 15 * time.Minute}
	old := f.storeAt(now.Add(-10 * time.Minute))
	calm := []string{f.seed(old, entry(1, "calm", store.Held)).ID, f.seed(old, entry(2, "calm", store.Held)).ID}
	f.seed(f.storeAt(now.Add(-20*time.Minute), cool), entry(3, "probe", store.Escalated)) // opens 20 min ago
	probe := []string{f.seed(old, entry(4, "probe", store.Held)).ID, f.seed(old, entry(5, "probe", store.Held)).ID}
	f.seed(f.storeAt(now.Add(-5*time.Minute), cool), entry(6, "shut", store.Escalated)) // opens 5 min ago
	shut := f.seed(f.storeAt(now.Add(-4*time.Minute)), entry(7, "shut", store.Held)).ID

	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	dry := f.run(h, true)
	if fd := finding(t, dry, audit.FindingHeldReleased); fd.Count != 3 || fd.Alert || fd.Repair.Planned != 3 || fd.Repair.Done != 0 {
		t.Errorf("dry run held_released = %+v, want 3 planned (2 of calm, the probe of probe), no alert", fd)
	}
	if got := section(t, dry, reconciler.SectionHeld).Counts; got["held"] != 5 {
		t.Errorf("held section counts = %v, want held 5 (every held entry read, released or not)", got)
	}
	// Each section reports what it cost: a dry run writes nothing, and
	// the held section read at least its five entries.
	for _, sec := range dry.Sections {
		if sec.FirestoreWrites != 0 {
			t.Errorf("dry run: section %s wrote %d documents, want none", sec.Name, sec.FirestoreWrites)
		}
	}
	if got := section(t, dry, reconciler.SectionHeld).FirestoreReads; got < 5 {
		t.Errorf("dry run: held section read %d documents, want at least its 5 entries", got)
	}
	for _, id := range append(append(append([]string{}, calm...), probe...), shut) {
		if st := f.get(id).Status; st != store.Held {
			t.Errorf("dry run moved %s to %s", id, st)
		}
	}

	rep := f.run(h, false)
	if fd := finding(t, rep, audit.FindingHeldReleased); fd.Count != 3 || fd.Repair.Done != 3 {
		t.Errorf("held_released = %+v, want 3 released", fd)
	}
	if got := section(t, rep, reconciler.SectionHeld).FirestoreWrites; got < 3 {
		t.Errorf("held section wrote %d documents, want at least the 3 entries it released", got)
	}
	q := f.queueTasks()
	for _, id := range calm {
		if e := f.get(id); e.Status != store.Scheduled || e.BreakerProbe || !slices.Contains(q, e.TaskName) {
			t.Errorf("calm entry %s = %s probe=%v task %s (queue %v), want scheduled with its task", id, e.Status, e.BreakerProbe, e.TaskName, q)
		}
	}
	released := 0
	for _, id := range probe {
		e := f.get(id)
		if e.Status == store.Scheduled {
			released++
			if !e.BreakerProbe || !slices.Contains(q, e.TaskName) || f.breakerDoc("probe").ProbeEntry != id {
				t.Errorf("probe entry %s = probe=%v task %s, breaker probe %q; want it the breaker's probe with its task", id, e.BreakerProbe, e.TaskName, f.breakerDoc("probe").ProbeEntry)
			}
		}
	}
	if released != 1 {
		t.Errorf("half-open breaker released %d entries, want exactly one probe", released)
	}
	if st := f.get(shut).Status; st != store.Held {
		t.Errorf("entry of an open breaker is %s, want held", st)
	}
	if len(q) != 3 {
		t.Errorf("queue = %v, want the three released tasks", q)
	}
	if again := f.run(h, false); len(again.Findings) != 0 {
		t.Errorf("second run: %s", summary(again))
	}
}

// The task that recovered an entry is not an orphan: when a step after the
// move failed (the completion record kept, the probe's report, the chain's
// recovery), replay answered 5xx and Cloud Tasks' redelivery of that task
// finishes them (store.MarkRecovered). Deleting it, as the orphan check
// did two minutes after the move, left the chain's parents replayed with
// nothing to recover them.
func TestRecoveringTaskIsNotAnOrphan(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	old := f.storeAt(time.Now().UTC().Add(-10 * time.Minute))
	e := f.seed(old, entry(21, "acme", store.Scheduled))
	if _, _, err := f.sched.Schedule(f.ctx, tasks.Request{EntryID: e.ID, Attempt: 1, At: e.NextRetryAt}); err != nil {
		t.Fatal(err)
	}
	f.move(old, e.ID, store.Scheduled, store.Replaying, "replay")
	f.complete(e.Tenant, e.IdempotencyKey)
	f.move(old, e.ID, store.Replaying, store.Recovered, "replay")

	rep := f.run(f.handler(reconciler.Config{TimeBudget: time.Minute}, nil), false)
	if fs := findings(rep, audit.AlertOrphanTask); len(fs) != 0 {
		t.Errorf("orphan_task = %+v, want none: the task finishes the recovery", fs)
	}
	if q := f.queueTasks(); !slices.Contains(q, e.TaskName) {
		t.Errorf("queue = %v, want the recovering task %s kept", q, e.TaskName)
	}
}

// beforeSchedule runs fn once, before the run's first Schedule.
type beforeSchedule struct {
	reconciler.Tasks
	once sync.Once
	fn   func()
}

func (b *beforeSchedule) Schedule(ctx context.Context, r tasks.Request) (string, bool, error) {
	b.once.Do(b.fn)
	return b.Tasks.Schedule(ctx, r)
}

// seedProbeTenant seeds a held entry of tenant calm (released first, its
// Schedule the tests' hook), and tenant probe's breaker, opened 20 minutes
// ago (past its cooldown), with two held entries, first and second in the
// held scan's order.
func seedProbeTenant(f *fixture) (first, second *store.Entry) {
	now := time.Now().UTC()
	old := f.storeAt(now.Add(-10 * time.Minute))
	calm := entry(1, "calm", store.Held)
	calm.NextRetryAt = now.Add(-3 * time.Hour)
	f.seed(old, calm)
	f.seed(f.storeAt(now.Add(-20*time.Minute), store.BreakerConfig{Threshold: 1, Window: time.Hour, Cooldown: 15 * time.Minute}),
		entry(3, "probe", store.Escalated))
	first, second = entry(4, "probe", store.Held), entry(5, "probe", store.Held)
	first.NextRetryAt, second.NextRetryAt = now.Add(-2*time.Hour), now.Add(-time.Hour)
	f.seed(old, first)
	f.seed(old, second)
	return first, second
}

// The held section asks the breaker before it moves the entry. When the
// half-open breaker's probe is an entry that moved on after the page was
// read (an operator discarded it), the probe is given back and the next
// held entry of the tenant becomes the probe in the same run. It used to
// stay the breaker's probe: the tenant's other held entries waited until
// the probe was settled as died, 30 minutes later, and then a cooldown.
func TestHeldProbeGivenBackWhenItsEntryMovedOn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	victim, next := seedProbeTenant(f)

	hook := &beforeSchedule{Tasks: f.sched, fn: func() { f.move(f.st, victim.ID, store.Held, store.Discarded, "operator") }}
	f.run(f.handler(reconciler.Config{TimeBudget: time.Minute}, nil, func(d *reconciler.Deps) { d.Tasks = hook }), false)
	b := f.breakerDoc("probe")
	if b.State != store.BreakerHalfOpen || b.ProbeEntry != next.ID {
		t.Errorf("breaker = %s with probe %q, want half-open with %s as its probe (%s was discarded)", b.State, b.ProbeEntry, next.ID, victim.ID)
	}
	if st := f.get(next.ID).Status; st != store.Scheduled {
		t.Errorf("%s = %s, want released as the probe", next.ID, st)
	}
}

// A probe reconcile did not make is not reconcile's to give back: an
// operator's probe now makes the entry the breaker's probe, then moves it
// out of held; reconcile, between the two, finds it the probe already and
// its own release refused, and leaves the probe to the operator's replay.
func TestHeldLeavesAnOperatorsProbe(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	chosen, next := seedProbeTenant(f)
	if _, err := f.st.BreakerAdvance(f.ctx, "probe", "reconcile"); err != nil {
		t.Fatal(err)
	}
	if ok, probe, err := f.st.BreakerAdmit(f.ctx, "probe", chosen.ID, "ops"); !ok || !probe || err != nil {
		t.Fatalf("BreakerAdmit(%s) = %t, %t, %v, want the probe", chosen.ID, ok, probe, err)
	}
	hook := &beforeSchedule{Tasks: f.sched, fn: func() { f.move(f.st, chosen.ID, store.Held, store.Scheduled, "ops") }}
	f.run(f.handler(reconciler.Config{TimeBudget: time.Minute}, nil, func(d *reconciler.Deps) { d.Tasks = hook }), false)
	if b := f.breakerDoc("probe"); b.ProbeEntry != chosen.ID {
		t.Errorf("breaker's probe = %q, want the operator's %s", b.ProbeEntry, chosen.ID)
	}
	if st := f.get(next.ID).Status; st != store.Held {
		t.Errorf("%s = %s, want held: the breaker has its probe", next.ID, st)
	}
}

// stallTasks lists the queue until the caller's deadline passes, as a
// page of slow calls near the end of the budget does.
type stallTasks struct{ reconciler.Tasks }

func (stallTasks) Each(ctx context.Context, _ func(string, time.Time) bool) error {
	<-ctx.Done()
	return ctx.Err()
}

// A run whose deadline passes in a slow page still saves its report and
// state: the repairs it made are applied, and a lost report meant no alert
// raised or cleared and the next run repeating the scans.
func TestReportSavedAfterTheDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil, func(d *reconciler.Deps) { d.Tasks = stallTasks{d.Tasks} })
	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer cancel()
	rep, err := h.Run(ctx, false)
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	for _, e := range rep.Errors {
		if strings.Contains(e, "report not stored") || strings.Contains(e, "state not saved") {
			t.Errorf("Run() error %q, want the report and state saved after the deadline", e)
		}
	}
	if _, err := f.st.GetAudit(f.ctx, rep.RunID); err != nil {
		t.Errorf("GetAudit(%s) = %v, want the report stored", rep.RunID, err)
	}
}

// With more open breakers than a run reads, the breakers section is
// partial, not complete: the alerts of the breakers it did not read are
// kept. Complete, it cleared them as if those breakers had closed.
func TestBreakersBeyondTheBoundKeepTheirAlerts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	now := time.Now().UTC()
	opener := f.storeAt(now.Add(-40*time.Minute), store.BreakerConfig{Threshold: 1, Window: time.Hour, Cooldown: 15 * time.Minute})
	tenants := []string{"stuck-a", "stuck-b", "stuck-c"}
	for i, tenant := range tenants {
		f.seed(opener, entry(uint64(60+i), tenant, store.Escalated))
	}
	stuckAlerts := func() []string {
		t.Helper()
		st, err := f.st.ActiveAlerts(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range st.Active {
			if a.Name == audit.AlertTenantBreakerOpen30m {
				out = append(out, a.Tenant)
			}
		}
		slices.Sort(out)
		return out
	}
	f.run(f.handler(reconciler.Config{TimeBudget: time.Minute}, nil), false)
	if got := stuckAlerts(); !slices.Equal(got, tenants) {
		t.Fatalf("alerts after a run that read every breaker = %v, want %v", got, tenants)
	}
	rep := f.run(f.handler(reconciler.Config{TimeBudget: time.Minute, MaxBreakers: 2}, nil), false)
	for _, s := range rep.Sections {
		if s.Name == reconciler.SectionBreakers && (s.Status != audit.StatusPartial || !strings.Contains(s.Note, "more than 2")) {
			t.Errorf("breakers section = %s (%q), want partial, saying so", s.Status, s.Note)
		}
	}
	if got := stuckAlerts(); !slices.Equal(got, tenants) {
		t.Errorf("alerts after a run that read 2 of 3 breakers = %v, want all %v kept", got, tenants)
	}
}
