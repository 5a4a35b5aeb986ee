package reconciler_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

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
	if sec := sectionOf(rep); sec.Counts["published"] != 1 || sec.Counts["failed"] != 0 {
		t.Errorf("up: section counts = %v, want published 1", sec.Counts)
	}
	if slices.Contains(rep.Alerts, audit.AlertNotificationsUnpublished) {
		t.Errorf("up: alerts = %v, want no %s", rep.Alerts, audit.AlertNotificationsUnpublished)
	}
	if len(tp.got) != 1 || tp.got[0][event.AttrKind] != string(event.NotifyEscalated) {
		t.Errorf("published %v, want one escalated notification", tp.got)
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
