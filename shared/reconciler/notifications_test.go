package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// topic is a notifications topic that fails while down.
type topic struct {
	mu   sync.Mutex
	down bool
	got  []map[string]string
}

func (t *topic) Publish(_ context.Context, _ []byte, attrs map[string]string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.down {
		return errors.New("topic unreachable")
	}
	t.got = append(t.got, attrs)
	return nil
}

// Every run publishes the outbox; what fails is a finding, and the next run
// publishes it.
func TestNotificationsSection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.seed(f.st, entry(7, "acme", store.Escalated))
	tp := &topic{down: true}
	fl := notify.New(f.st, tp, notify.WithTasks(notify.LazyJetStream(func(context.Context) (jetstream.JetStream, error) { return f.js, nil })))
	h := reconciler.New(reconciler.Config{AdvisoryStream: advStream, RecordStream: recStream}, reconciler.Deps{
		Logger: obs.NewLogger(f.logs), Store: f.st, Tasks: f.sched, Notify: fl,
		JetStream: func(context.Context) (jetstream.JetStream, error) { return f.js, nil },
	})

	sectionOf := func(rep *audit.Report) *audit.Section {
		i := slices.IndexFunc(rep.Sections, func(s *audit.Section) bool { return s.Name == reconciler.SectionNotifications })
		if i < 0 {
			t.Fatalf("no %s section in %+v", reconciler.SectionNotifications, rep.Sections)
		}
		return rep.Sections[i]
	}
	rep := f.run(h, false)
	if sec := sectionOf(rep); sec.Counts["failed"] != 1 || sec.Counts["published"] != 0 {
		t.Errorf("down: section counts = %v, want failed 1", sec.Counts)
	}
	if !slices.Contains(rep.Alerts, audit.AlertNotificationsUnpublished) {
		t.Errorf("down: alerts = %v, want %s", rep.Alerts, audit.AlertNotificationsUnpublished)
	}

	tp.mu.Lock()
	tp.down = false
	tp.mu.Unlock()
	rep = f.run(h, false)
	// The escalation, and the first run's alert_raised of
	// notifications_unpublished (its alert_cleared leaves after this
	// run's report).
	if sec := sectionOf(rep); sec.Counts["published"] != 2 || sec.Counts["failed"] != 0 {
		t.Errorf("up: section counts = %v, want published 2", sec.Counts)
	}
	if slices.Contains(rep.Alerts, audit.AlertNotificationsUnpublished) {
		t.Errorf("up: alerts = %v, want no %s", rep.Alerts, audit.AlertNotificationsUnpublished)
	}
	var kinds []string
	for _, attrs := range tp.got {
		kinds = append(kinds, attrs[event.AttrKind])
	}
	slices.Sort(kinds)
	if want := []string{"alert_cleared", "alert_raised", "escalated"}; !slices.Equal(kinds, want) {
		t.Errorf("published %v, want kinds %v", tp.got, want)
	}
	subject := event.DefaultConventions.TaskSubject(event.DefaultTriageAgent, event.TriageTaskType)
	s, err := f.js.Stream(f.ctx, workStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(f.ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subject]; n != 1 {
		t.Errorf("%d triage tasks on %s, want 1 (the first run's, not repeated)", n, subject)
	}
	if rep := f.run(h, true); sectionOf(rep).Note == "" {
		t.Errorf("dry run published (section %+v), want a note that it did not", sectionOf(rep))
	}
}

// alertTopic records the alert notifications published, as
// "<kind> <alert>"; it fails while down.
type alertTopic struct {
	mu   sync.Mutex
	down bool
	got  []string
}

func (t *alertTopic) Publish(_ context.Context, data []byte, attrs map[string]string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.down {
		return errors.New("topic unreachable")
	}
	n, err := event.DecodeNotification(data)
	if err != nil {
		return err
	}
	if n.Kind.IsAlert() {
		t.got = append(t.got, fmt.Sprintf("%s %s", attrs[event.AttrKind], n.AlertName))
	}
	return nil
}

func (t *alertTopic) published() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.got)
}

// An alert a run raises is notified once when it is raised and once when a
// later run no longer sees it, however many runs come between or after;
// an alert notification the topic refused leaves with the next run, still
// once.
func TestAlertNotificationsOnTransitions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	// Scheduled without its task: missing_task, repaired by the first run.
	f.seed(f.storeAt(time.Now().Add(-10*time.Minute)), entry(7, "acme", store.Scheduled))
	tp := &alertTopic{down: true}
	h := reconciler.New(reconciler.Config{TimeBudget: time.Minute}, reconciler.Deps{
		Logger: obs.NewLogger(f.logs), Store: f.st, Tasks: f.sched, Notify: notify.New(f.st, tp),
	})
	raised := "alert_raised " + audit.AlertMissingTask
	cleared := "alert_cleared " + audit.AlertMissingTask
	steps := []struct {
		name   string
		down   bool
		alerts []string // the run's alerts
		want   []string // published so far
	}{
		{"raised, the topic down", true, []string{audit.AlertMissingTask}, nil},
		{"repaired: cleared; the raise leaves first", false, []string{}, []string{raised, cleared}},
		{"nothing changed", false, []string{}, []string{raised, cleared}},
		{"a dry run", false, []string{}, []string{raised, cleared}},
		{"run again", false, []string{}, []string{raised, cleared}},
	}
	for _, st := range steps {
		tp.mu.Lock()
		tp.down = st.down
		tp.mu.Unlock()
		rep := f.run(h, st.name == "a dry run")
		if d := cmp.Diff(st.alerts, rep.Alerts); d != "" {
			t.Errorf("%s: alerts (-want +got):\n%s", st.name, d)
		}
		if d := cmp.Diff(st.want, tp.published()); d != "" {
			t.Errorf("%s: alert notifications published (-want +got):\n%s", st.name, d)
		}
	}
}
