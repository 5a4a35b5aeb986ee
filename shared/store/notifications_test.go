package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
)

// outboxed is one outbox document and the notification it holds.
type outboxed struct {
	o *Outbox
	n event.Notification
}

// readOutbox reads every outbox document with its notification.
func readOutbox(t *testing.T, s *Store) []outboxed {
	t.Helper()
	snaps, err := s.fs.Collection(Notifications).Documents(testenv.Context(t)).GetAll()
	if err != nil {
		t.Fatal(err)
	}
	var out []outboxed
	for _, snap := range snaps {
		o, err := decodeOutbox(snap)
		if err != nil {
			t.Fatal(err)
		}
		n, err := o.Event()
		if err != nil {
			t.Fatalf("outbox %s: %v", o.ID, err)
		}
		out = append(out, outboxed{o, n})
	}
	return out
}

// outboxKinds lists the kinds of the outbox's notifications, sorted.
func outboxKinds(t *testing.T, s *Store) []string {
	t.Helper()
	var kinds []string
	for _, x := range readOutbox(t, s) {
		if x.n.ID != x.o.ID || string(x.n.Kind) != x.o.Kind || x.o.State != OutboxPending {
			t.Errorf("outbox %s = %+v (notification %+v), want a pending document under the notification's id", x.o.ID, x.o, x.n)
		}
		kinds = append(kinds, x.o.Kind)
	}
	slices.Sort(kinds)
	return kinds
}

// Every transition someone must hear about writes exactly one notification,
// in its own transaction: a repeated Record or a refused repeat of a
// transition writes none.
func TestOutboxOnePerTransition(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)

	esc := entry("TASKS.esc", nil)
	esc.Status, esc.TaskName, esc.Plan.EscalateTo = Escalated, "", "triager"
	for range 3 {
		if _, err := s.Record(ctx, esc, "classify"); err != nil {
			t.Fatal(err)
		}
	}
	sched := entry("TASKS.sched", nil)
	if _, err := s.Record(ctx, sched, "classify"); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"escalated"}, outboxKinds(t, s)); d != "" {
		t.Fatalf("after Record (-want +got):\n%s", d)
	}
	claim(t, s, sched.ID)
	clock.Add(1)
	for i := range 2 {
		_, err := s.Transition(ctx, sched.ID, Change{From: []Status{Replaying}, To: AwaitingApproval, By: "replay"})
		if (err == nil) != (i == 0) {
			t.Fatalf("Transition #%d = %v", i, err)
		}
	}
	clock.Add(1)
	walk(t, s, sched.ID, AwaitingApproval, Scheduled, Replaying)
	if _, err := s.Transition(ctx, sched.ID, Change{From: []Status{Replaying}, To: Quarantined, By: "replay"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, sched.ID, Change{From: []Status{Quarantined}, To: Discarded, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"awaiting_approval", "escalated", "quarantined"}, outboxKinds(t, s)); d != "" {
		t.Fatalf("after transitions (-want +got):\n%s", d)
	}
	o, err := s.GetNotification(ctx, event.NotificationID(event.NotifyEscalated, esc.ID, clock.Now().Add(-2)))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := o.Event(); n.EscalateTo != "triager" || n.EntryID != esc.ID || n.Tenant != "acme" || o.TaskType != "code_review" {
		t.Errorf("escalated notification = %+v (%+v), want entry %s to triager", n, o, esc.ID)
	}
}

func TestOutboxBreakerStates(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	openBreaker(t, s, "acme")
	clock.Add(DefaultBreaker.Cooldown)
	if b, err := s.BreakerAdvance(ctx, "acme", "reconcile"); err != nil || b.State != BreakerHalfOpen {
		t.Fatalf("BreakerAdvance = %+v, %v", b, err)
	}
	clock.Add(1)
	if _, err := s.BreakerClose(ctx, "acme", authority.Actor{Name: "alice", Role: authority.Operator}, "fixed upstream"); err != nil {
		t.Fatal(err)
	}
	want := []string{"breaker_closed", "breaker_half_open", "breaker_opened"}
	if d := cmp.Diff(want, outboxKinds(t, s)); d != "" {
		t.Errorf("outbox kinds (-want +got):\n%s", d)
	}
	// The notification of an operator's override says who, in which role,
	// and why.
	for _, x := range readOutbox(t, s) {
		const note = "closed by alice (operator): fixed upstream"
		if x.n.Kind == event.NotifyBreakerClosed && (x.n.BreakerNote != note || !strings.Contains(x.n.Summary, note)) {
			t.Errorf("breaker_closed notification = note %q, summary %q; want %q in both", x.n.BreakerNote, x.n.Summary, note)
		}
	}
}

// Two publishers claiming at once never both get a notification.
func TestClaimNotificationsExclusive(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	for i := range 6 {
		recordSettled(t, s, fmt.Sprintf("TASKS.q%d", i), Quarantined)
	}
	var mu sync.Mutex
	claimed := map[string]string{}
	outbox := map[string]*Outbox{}
	var wg sync.WaitGroup
	for _, owner := range []string{"a", "b"} {
		wg.Go(func() {
			got, err := s.ClaimNotifications(ctx, owner, 60e9, 100)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, o := range got {
				if prev, ok := claimed[o.ID]; ok {
					t.Errorf("%s claimed by %s and %s", o.ID, prev, owner)
				}
				claimed[o.ID], outbox[o.ID] = owner, o
			}
		})
	}
	wg.Wait()
	if len(claimed) != 6 {
		t.Errorf("claimed %d notifications, want 6", len(claimed))
	}
	for id, owner := range claimed {
		other := map[string]string{"a": "b", "b": "a"}[owner]
		if err := s.NotificationPublished(ctx, outbox[id], other); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("NotificationPublished(%s, %s) = %v, want ErrLeaseLost", id, other, err)
		}
		if err := s.NotificationPublished(ctx, outbox[id], owner); err != nil {
			t.Errorf("NotificationPublished(%s, %s) = %v", id, owner, err)
		}
	}
	clock.Add(61e9)
	if got, err := s.ClaimNotifications(ctx, "c", 60e9, 100); err != nil || len(got) != 0 {
		t.Errorf("ClaimNotifications after publishing = %d, %v, want none", len(got), err)
	}
}

// outboxAlerts lists the outbox's alert notifications as
// "<kind> <alert>/<tenant>", sorted.
func outboxAlerts(t *testing.T, s *Store) []string {
	t.Helper()
	out := []string{}
	for _, x := range readOutbox(t, s) {
		if x.n.Kind.IsAlert() {
			out = append(out, fmt.Sprintf("%s %s/%s", x.n.Kind, x.n.AlertName, x.o.Tenant))
		}
	}
	slices.Sort(out)
	return out
}

// An alert's raise and its clearing are each notified once, in the
// transaction that saves the audit: however often reconcile runs or a save
// is retried, whatever a dry run or a late older report says, and an alert
// of a section that did not complete is neither cleared nor raised again.
func TestAlertNotificationsOncePerTransition(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	type alert struct{ name, section, tenant string }
	missing := alert{audit.AlertMissingTask, "tasks", ""}
	poison := alert{audit.AlertTenantPoisonBurst, "entries", "acme"}
	n := 0
	report := func(dry bool, at time.Time, sections map[string]string, alerts ...alert) *audit.Report {
		n++
		r := &audit.Report{Schema: audit.Schema, RunID: fmt.Sprintf("run-%d", n), DryRun: dry, StartedAt: at, FinishedAt: at.Add(time.Second)}
		for name, status := range sections {
			r.Sections = append(r.Sections, &audit.Section{Name: name, Status: status})
		}
		for _, a := range alerts {
			f := audit.NewFinding(a.name, a.section, a.tenant, a.name+" seen")
			f.Example("x")
			r.Findings = append(r.Findings, f)
		}
		r.Finish()
		return r
	}
	complete := map[string]string{"tasks": audit.StatusComplete, "entries": audit.StatusComplete}
	partialEntries := map[string]string{"tasks": audit.StatusComplete, "entries": audit.StatusPartial}
	raisedBoth := []string{"alert_raised missing_task/default", "alert_raised tenant_poison_burst/acme"}
	first := report(false, clock.Now(), complete, missing, poison)
	steps := []struct {
		name string
		r    *audit.Report
		want []string // the outbox's alert notifications after the step
	}{
		{"raised", first, raisedBoth},
		{"the same save retried", first, raisedBoth},
		{"still raised", report(false, clock.Now().Add(time.Minute), complete, missing, poison), raisedBoth},
		{"a dry run sees neither", report(true, clock.Now().Add(2*time.Minute), complete), raisedBoth},
		{"entries out of budget: the poison alert is carried", report(false, clock.Now().Add(3*time.Minute), partialEntries, missing), raisedBoth},
		{"an older report arriving late", report(false, clock.Now().Add(-time.Hour), complete), raisedBoth},
		{"both cleared", report(false, clock.Now().Add(4*time.Minute), complete),
			append([]string{"alert_cleared missing_task/default", "alert_cleared tenant_poison_burst/acme"}, raisedBoth...)},
		{"cleared stays cleared", report(false, clock.Now().Add(5*time.Minute), complete),
			append([]string{"alert_cleared missing_task/default", "alert_cleared tenant_poison_burst/acme"}, raisedBoth...)},
		{"raised again", report(false, clock.Now().Add(6*time.Minute), complete, missing),
			[]string{"alert_cleared missing_task/default", "alert_cleared tenant_poison_burst/acme",
				"alert_raised missing_task/default", "alert_raised missing_task/default", "alert_raised tenant_poison_burst/acme"}},
	}
	for _, st := range steps {
		if err := s.SaveAudit(ctx, st.r); err != nil {
			t.Fatalf("%s: SaveAudit(%s) = %v", st.name, st.r.RunID, err)
		}
		if d := cmp.Diff(st.want, outboxAlerts(t, s)); d != "" {
			t.Errorf("%s: alert notifications (-want +got):\n%s", st.name, d)
		}
	}
	got, err := s.ActiveAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Active) != 1 || got.Active[0].Name != audit.AlertMissingTask || got.RunID != steps[len(steps)-1].r.RunID {
		t.Errorf("ActiveAlerts() = %+v, want missing_task raised by the last run", got)
	}
}

// A published notification expires PublishedRetention after its publish
// (the TTL policy deletes it then); a pending one only after Retention.
func TestPublishedNotificationExpires(t *testing.T) {
	s, clock := newStore(t)
	ctx := testenv.Context(t)
	recordSettled(t, s, "TASKS.ttl", Quarantined)
	claimed, err := s.ClaimNotifications(ctx, "p", time.Minute, 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimNotifications = %d, %v; want 1", len(claimed), err)
	}
	if want := claimed[0].CreatedAt.Add(Retention); !claimed[0].ExpireAt.Equal(want) {
		t.Errorf("pending expire_at = %s, want %s", claimed[0].ExpireAt, want)
	}
	clock.Add(time.Hour)
	if err := s.NotificationPublished(ctx, claimed[0], "p"); err != nil {
		t.Fatal(err)
	}
	o, err := s.GetNotification(ctx, claimed[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(PublishedRetention); !o.ExpireAt.Equal(want) || !o.PublishedAt.Equal(clock.Now()) {
		t.Errorf("published expire_at, published_at = %s, %s; want %s, %s", o.ExpireAt, o.PublishedAt, want, clock.Now())
	}
}

// A claim and the settles after it are writes conditioned on the document
// as the flush last read or wrote it: a notification nobody else touches
// costs the query's one read. One that changed meanwhile is read again and
// settled if the flush still holds it; one whose lease another publisher
// took over is refused, so it is never marked by two; one another holds is
// not even tried. Each row is a redelivery-safe path: what a repeated or
// concurrent flush does to the same document.
func TestOutboxClaimAndSettleFromWhatWasRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		// meanwhile runs between p's claim and its settles.
		meanwhile func(t *testing.T, s *Store, clock *testenv.Clock, id string)
		// settleReads is what the triage mark and the publish mark read.
		settleReads int64
		wantErr     error
		wantState   string
		wantOwner   string
	}{
		{name: "unchanged", settleReads: 0, wantState: OutboxPublished},
		// Both marks read: the transaction that wrote the first does not
		// tell its write's time (a rare path: another flush's webhook
		// fan-out touched the document).
		{name: "changed meanwhile, still held", settleReads: 2, wantState: OutboxPublished,
			meanwhile: func(t *testing.T, s *Store, _ *testenv.Clock, id string) {
				if _, err := s.outboxRef(id).Update(testenv.Context(t), []firestore.Update{{Path: "webhooks_pending", Value: false}}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "lease taken over", settleReads: 1, wantErr: ErrLeaseLost, wantState: OutboxPending, wantOwner: "q",
			meanwhile: func(t *testing.T, s *Store, clock *testenv.Clock, _ string) {
				clock.Add(2 * time.Minute)
				if got, err := s.ClaimNotifications(testenv.Context(t), "q", time.Minute, 10); err != nil || len(got) != 1 {
					t.Fatalf("ClaimNotifications(q) after p's lease = %d, %v; want 1", len(got), err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clock := newStore(t)
			ctx := testenv.Context(t)
			recordSettled(t, s, "TASKS.n1", Escalated)
			before := s.Ops()
			claimed, err := s.ClaimNotifications(ctx, "p", time.Minute, 10)
			if err != nil || len(claimed) != 1 {
				t.Fatalf("ClaimNotifications(p) = %d, %v; want 1", len(claimed), err)
			}
			if got := s.Ops().Reads - before.Reads; got != 1 {
				t.Errorf("ClaimNotifications reads = %d, want 1 (the query)", got)
			}
			// Another publisher finds it held: it reads it in its query
			// and writes nothing.
			before = s.Ops()
			if got, err := s.ClaimNotifications(ctx, "r", time.Minute, 10); err != nil || len(got) != 0 {
				t.Errorf("ClaimNotifications(r) while p holds it = %d, %v; want none", len(got), err)
			}
			if got := s.Ops(); got.Reads-before.Reads != 1 || got.Writes != before.Writes {
				t.Errorf("ClaimNotifications(r) ops = %+v after %+v, want 1 read and no write", got, before)
			}
			o := claimed[0]
			if tc.meanwhile != nil {
				tc.meanwhile(t, s, clock, o.ID)
			}
			before = s.Ops()
			err = s.NotificationTriagePublished(ctx, o, "p")
			if err == nil {
				err = s.NotificationPublished(ctx, o, "p")
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("settle = %v, want %v", err, tc.wantErr)
			}
			if got := s.Ops().Reads - before.Reads; got != tc.settleReads {
				t.Errorf("settle reads = %d, want %d", got, tc.settleReads)
			}
			stored, err := s.GetNotification(ctx, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			if stored.State != tc.wantState || stored.LeaseOwner != tc.wantOwner || stored.TriagePublished != (tc.wantErr == nil) {
				t.Errorf("stored = state %s, owner %q, triage published %v; want %s, %q, %v",
					stored.State, stored.LeaseOwner, stored.TriagePublished, tc.wantState, tc.wantOwner, tc.wantErr == nil)
			}
			if tc.wantErr == nil && (!stored.PublishedAt.Equal(clock.Now()) || stored.LeaseUntil != (time.Time{}) || stored.Attempts != 1) {
				t.Errorf("published = at %s, lease until %s, attempts %d; want %s, none, 1", stored.PublishedAt, stored.LeaseUntil, stored.Attempts, clock.Now())
			}
		})
	}
}

// A flush right after a commit claims what the commit staged by id, from
// the document as the commit wrote it: a write conditioned on its update
// time, which reads nothing. One changed since (a sweep's claim, a webhook
// fan-out) is read once and claimed only if no lease on it is running,
// this owner's included; a claim
// repeated once it is published claims nothing.
func TestClaimStagedFromTheCommit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		meanwhile func(t *testing.T, s *Store, id string)
		reads     int64
		claimed   bool
	}{
		{name: "as committed", reads: 0, claimed: true},
		{name: "fanned out meanwhile", reads: 1, claimed: true,
			meanwhile: func(t *testing.T, s *Store, id string) {
				if err := s.WebhookFanOutDone(testenv.Context(t), id); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "claimed by a sweep meanwhile", reads: 1, claimed: false,
			meanwhile: func(t *testing.T, s *Store, _ string) {
				if got, err := s.ClaimNotifications(testenv.Context(t), "sweep", time.Minute, 10); err != nil || len(got) != 1 {
					t.Fatalf("ClaimNotifications(sweep) = %d, %v; want 1", len(got), err)
				}
			}},
		// Its TTL deleted it (or a test's cleanup): nothing to claim.
		{name: "gone meanwhile", reads: 1, claimed: false,
			meanwhile: func(t *testing.T, s *Store, id string) {
				if _, err := s.outboxRef(id).Delete(testenv.Context(t)); err != nil {
					t.Fatal(err)
				}
			}},
		// One flusher's concurrent calls share its owner: the sweep of
		// another request of the same instance holds it.
		{name: "claimed by this owner's sweep meanwhile", reads: 1, claimed: false,
			meanwhile: func(t *testing.T, s *Store, _ string) {
				if got, err := s.ClaimNotifications(testenv.Context(t), "p", time.Minute, 10); err != nil || len(got) != 1 {
					t.Fatalf("ClaimNotifications(p) = %d, %v; want 1", len(got), err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t)
			ctx := testenv.Context(t)
			e := entry("TASKS.s1", nil)
			e.Status, e.TaskName = Escalated, ""
			res, err := s.Record(ctx, e, "classify")
			if err != nil || len(res.Staged) != 1 {
				t.Fatalf("Record() staged %d, %v; want 1", len(res.Staged), err)
			}
			staged := res.Staged[0]
			if tc.meanwhile != nil {
				tc.meanwhile(t, s, staged.ID)
			}
			before := s.Ops()
			claim, err := s.ClaimStaged(ctx, staged, "p", time.Minute)
			if err != nil || (claim != nil) != tc.claimed {
				t.Fatalf("ClaimStaged() = %+v, %v; want claimed %v", claim, err, tc.claimed)
			}
			if got := s.Ops().Reads - before.Reads; got != tc.reads {
				t.Errorf("ClaimStaged() read %d documents, want %d", got, tc.reads)
			}
			if !tc.claimed {
				return
			}
			if err := s.NotificationPublished(ctx, claim, "p"); err != nil {
				t.Fatalf("NotificationPublished() = %v", err)
			}
			stored, err := s.GetNotification(ctx, staged.ID)
			if err != nil || stored.State != OutboxPublished || stored.Attempts != 1 {
				t.Errorf("stored = %+v, %v; want published after 1 attempt", stored, err)
			}
			// The same flush repeating its claim of a published one
			// claims nothing.
			if again, err := s.ClaimStaged(ctx, staged, "p", time.Minute); err != nil || again != nil {
				t.Errorf("ClaimStaged() after the publish = %+v, %v; want nothing", again, err)
			}
		})
	}
}
