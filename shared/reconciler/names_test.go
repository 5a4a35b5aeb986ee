package reconciler_test

import (
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Dead tasks whose names broke the naming rule are recorded under the
// reserved tenant; reconcile raises invalid_names (WARNING, one log entry)
// while the window holds any, counted from the tenant counters, and not
// otherwise.
func TestInvalidNamesAlert(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	recent := f.storeAt(time.Now().UTC().Add(-5 * time.Minute))
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	f.seed(recent, entry(1, "acme", store.Escalated))
	if fs := findings(f.run(h, true), audit.AlertInvalidNames); len(fs) != 0 {
		t.Fatalf("invalid_names = %+v without any flagged entry, want none", fs)
	}
	for seq := uint64(2); seq <= 4; seq++ {
		e := entry(seq, event.ReservedTenant, store.Escalated)
		e.InvalidNames = []event.InvalidName{{Field: "tenant", Value: "acme\u202e", Size: 7, Problem: "holds U+202E"}}
		f.seed(recent, e)
	}
	f.logs.reset()
	rep := f.run(h, false)
	fd := finding(t, rep, audit.AlertInvalidNames)
	if fd.Tenant != event.ReservedTenant || fd.Severity != audit.SevWarning || !fd.Alert || fd.Value != 3 || fd.Repair != nil {
		t.Errorf("invalid_names = %+v, want a WARNING alert of tenant %s counting 3 entries", fd, event.ReservedTenant)
	}
	logged := 0
	for _, name := range f.logs.alerts(t) {
		if name == audit.AlertInvalidNames {
			logged++
		}
	}
	if logged != 1 {
		t.Errorf("invalid_names logged %d times, want once", logged)
	}
}
