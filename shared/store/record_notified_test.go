package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// Record says when it staged a notification, so the caller flushes the
// outbox only then: a breaker's change of state and an entry that needs a
// human do; a scheduled entry and an entry held by a breaker known to be
// open (every entry of a one-tenant storm after the first few) do not.
func TestRecordNotified(t *testing.T) {
	s, c := newStore(t)
	ctx := testenv.Context(t)
	type step struct {
		name   string
		status Status // the entry's status as classify decided it
		wait   time.Duration
		want   bool
		stored Status
	}
	var steps []step
	for i := 1; i < DefaultBreaker.Threshold; i++ {
		steps = append(steps, step{fmt.Sprintf("failure %d, breaker closed", i), Scheduled, time.Second, false, Scheduled})
	}
	steps = append(steps, []step{
		{"the failure that opens the breaker", Scheduled, time.Second, true, Held},
		{"held, breaker known open", Scheduled, time.Second, false, Held},
		{"held again, breaker known open", Scheduled, time.Second, false, Held},
		{"escalated while the breaker is open", Escalated, time.Second, true, Escalated},
		{"after the cooldown: the half-open probe", Scheduled, DefaultBreaker.Cooldown, true, Scheduled},
	}...)
	for i, st := range steps {
		c.Add(st.wait)
		e := entry(fmt.Sprintf("TASKS.%d", i+1), nil)
		e.Status = st.status
		if st.status != Scheduled {
			e.TaskName = ""
		}
		res, err := s.Record(ctx, e, "classify")
		if err != nil {
			t.Fatalf("%s: Record() = %v", st.name, err)
		}
		if res.Notified() != st.want || res.Entry.Status != st.stored {
			t.Errorf("%s: Record() = notified %v, status %s; want notified %v, status %s", st.name, res.Notified(), res.Entry.Status, st.want, st.stored)
		}
	}
}
