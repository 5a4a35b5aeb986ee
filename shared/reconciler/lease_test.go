package reconciler_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// Two runs started together never repair one thing twice: the lease lets
// one of them work and the other answers 409 (or, if the first finished
// already, finds nothing left to repair). Either way the repairs add up to
// exactly the seeded problems.
func TestConcurrentRunsRepairOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	now := time.Now().UTC()
	old := f.storeAt(now.Add(-10 * time.Minute))
	var missing []string
	for i := range 3 {
		missing = append(missing, f.seed(old, entry(uint64(10+i), "acme", store.Scheduled)).ID)
	}
	for i := range 2 {
		id := "TASKS.90" + string(rune('0'+i))
		if _, _, err := f.sched.Schedule(f.ctx, tasks.Request{EntryID: id, Attempt: 1, At: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	const seeded = 5

	for round := range 3 {
		h1 := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
		h2 := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
		startRound := time.Now()
		var wg sync.WaitGroup
		codes := make([]int, 2)
		reports := make([]*audit.Report, 2)
		for i, h := range []*reconciler.Handler{h1, h2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/Reconcile", nil))
				codes[i] = w.Code
				if w.Code == http.StatusOK {
					reports[i] = &audit.Report{}
					if err := json.Unmarshal(w.Body.Bytes(), reports[i]); err != nil {
						t.Errorf("report: %v", err)
					}
				} else if w.Code == http.StatusConflict {
					var held reconciler.LeaseHeld
					if err := json.Unmarshal(w.Body.Bytes(), &held); err != nil || held.Status != "lease_held" || !strings.Contains(held.Message, "holds the lease until") {
						t.Errorf("409 body = %s (%v), want lease_held with its expiry", w.Body, err)
					}
				} else {
					t.Errorf("round %d run %d: status %d: %s", round, i, w.Code, w.Body)
				}
			}()
		}
		wg.Wait()
		t.Logf("round %d: %v codes %v", round, time.Since(startRound), codes)
		done := 0
		for _, rep := range reports {
			if rep != nil {
				done += rep.Repairs.Done
			}
		}
		want := 0
		if round == 0 {
			want = seeded
		}
		if done != want {
			t.Errorf("round %d: repairs done by both runs = %d (codes %v), want %d", round, done, codes, want)
		}
	}
	q := f.queueTasks()
	if len(q) != len(missing) {
		t.Errorf("queue = %v, want one task per scheduled entry", q)
	}
	for _, id := range missing {
		if e := f.get(id); e.TaskName != tasks.Name(id, 1) {
			t.Errorf("entry %s task = %s, want the original name (recreated once)", id, e.TaskName)
		}
	}
}

func TestLeaseHeldAnswers409AndChangesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	old := f.storeAt(time.Now().Add(-10 * time.Minute))
	e := f.seed(old, entry(1, "acme", store.Scheduled))
	lease, err := f.st.AcquireLease(f.ctx, "other-run", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/Reconcile", nil))
	var held reconciler.LeaseHeld
	if w.Code != http.StatusConflict || json.Unmarshal(w.Body.Bytes(), &held) != nil || held.Holder != "other-run" || held.Until.Sub(lease.Until).Abs() > time.Millisecond {
		t.Fatalf("ServeHTTP with a held lease = %d %s, want 409 naming other-run until %s", w.Code, w.Body, lease.Until)
	}
	if q := f.queueTasks(); len(q) != 0 {
		t.Errorf("a run without the lease created tasks: %v", q)
	}
	// A recount takes the same lease, so it is refused too.
	if _, err := h.Recount(f.ctx, reconciler.RecountOptions{}); !errors.Is(err, reconciler.ErrLeaseHeld) {
		t.Errorf("Recount with a held lease = %v, want ErrLeaseHeld", err)
	}
	// A dry run needs no lease: it writes nothing but its report.
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/Reconcile?dry_run=true", nil))
	var rep audit.Report
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &rep) != nil || !rep.DryRun {
		t.Fatalf("dry run during a lease = %d %s, want 200 with a dry-run report", w.Code, w.Body)
	}
	if fd := finding(t, &rep, audit.AlertMissingTask); fd.Examples[0] != e.ID || fd.Repair.Done != 0 {
		t.Errorf("dry run missing_task = %+v", fd)
	}
	// Once the holder releases it, a run proceeds.
	if err := f.st.ReleaseLease(f.ctx, "other-run"); err != nil {
		t.Fatal(err)
	}
	if rep := f.run(h, false); rep.Repairs.Done != 1 {
		t.Errorf("run after release repaired %d, want 1", rep.Repairs.Done)
	}
	// The run and then a recount each release the lease they took.
	if _, err := h.Recount(f.ctx, reconciler.RecountOptions{}); err != nil {
		t.Errorf("Recount after the run = %v, want the lease free", err)
	}
	if _, err := f.st.AcquireLease(f.ctx, "next-run", time.Minute); err != nil {
		t.Errorf("AcquireLease after a run and a recount = %v, want both to have released it", err)
	}
}

func TestServeHTTPRefusesBadRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	for _, tc := range []struct {
		method, target string
		want           int
	}{
		{http.MethodDelete, "/Reconcile", http.StatusMethodNotAllowed},
		{http.MethodPost, "/Reconcile?dry_run=perhaps", http.StatusBadRequest},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.target, nil))
		if w.Code != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.target, w.Code, tc.want)
		}
	}
}

// An unreadable state document (a format from another version, a manual
// edit) costs the cursors, not the audit: the run reports the problem,
// audits from the beginning and writes a good state for the next run.
func TestUnreadableStateRestartsScans(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	e := f.seed(f.storeAt(time.Now().Add(-10*time.Minute)), entry(1, "acme", store.Scheduled))
	if _, err := f.fs.Collection(store.Audits).Doc(store.AuditState).Set(f.ctx, map[string]any{"capture": "not a map", "tasks": 42}); err != nil {
		t.Fatal(err)
	}
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	rep, err := h.Run(f.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], "state unreadable") {
		t.Errorf("errors = %v, want the unreadable state reported", rep.Errors)
	}
	if fd := finding(t, rep, audit.AlertMissingTask); fd.Examples[0] != e.ID || fd.Repair.Done != 1 {
		t.Errorf("missing_task = %+v, want it found and repaired despite the state", fd)
	}
	if again := f.run(h, false); len(again.Findings) != 0 {
		t.Errorf("next run: %s", summary(again))
	}
}

// Tasks whose names jsdlq did not make (forged, or another team's in a
// shared queue) are counted and never deleted.
func TestForeignTasksLeftAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	for _, id := range []string{"manual-task-1", "12345678-x-r0", "deadbeef-TASKS_d1-r1x"} {
		_, err := f.ct.Client.CreateTask(f.ctx, &cloudtaskspb.CreateTaskRequest{Parent: f.queue, Task: &cloudtaskspb.Task{
			Name: f.queue + "/tasks/" + id,
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
				Url: "http://127.0.0.1:9/elsewhere", HttpMethod: cloudtaskspb.HttpMethod_POST}},
		}})
		if err != nil {
			t.Fatalf("CreateTask(%s) = %v", id, err)
		}
	}
	rep := f.run(f.handler(reconciler.Config{TimeBudget: time.Minute}, nil), false)
	if len(rep.Findings) != 0 {
		t.Errorf("findings for foreign tasks: %s", summary(rep))
	}
	if got := section(t, rep, reconciler.SectionTasks).Counts["foreign_tasks"]; got != 3 {
		t.Errorf("foreign_tasks = %d, want 3", got)
	}
	if q := f.queueTasks(); len(q) != 3 {
		t.Errorf("queue = %v, want the three foreign tasks kept", q)
	}
}
