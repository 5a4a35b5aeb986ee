package reconciler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/tools/stack"
)

// runBound is far above IOTimeout (2 s here) and far below the budget
// (4 min): a run that ends inside it did not wait for the budget. It is a
// bound on waiting, not a speed measurement.
const runBound = time.Minute

// With Firestore unreachable the lease cannot be taken. The run fails after
// one IOTimeout instead of holding the call for the whole budget + FinishPage
// (the client retries UNAVAILABLE until its context ends).
func TestUnreachableFirestoreFailsWithinIOTimeout(t *testing.T) {
	addr, err := stack.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	// The client prefers FIRESTORE_EMULATOR_HOST (set by `make test`) to an
	// explicit endpoint: point it at the closed port too.
	t.Setenv("FIRESTORE_EMULATOR_HOST", addr)
	fs, err := firestore.NewClient(context.Background(), "unreachable",
		option.WithEndpoint(addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	h := reconciler.New(reconciler.Config{TimeBudget: 4 * time.Minute, IOTimeout: 2 * time.Second},
		reconciler.Deps{Logger: obs.Discard(), Store: store.New(fs)})
	start := time.Now()
	_, err = h.Run(testenv.Context(t), false)
	if err == nil || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("Run with Firestore unreachable = %v, want a lease error", err)
	}
	if d := time.Since(start); d > runBound {
		t.Fatalf("Run with Firestore unreachable took %v; each call must end within IOTimeout", d)
	}
}

// With Cloud Tasks unreachable the tasks section fails (reported with its
// error), every other section still runs, and the run ends long before its
// budget; nothing is repaired blindly.
func TestUnreachableCloudTasksFailsTheSectionOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	f.seed(f.st, entry(1, "acme", store.Scheduled))
	addr, err := stack.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dead := tasks.New(tasks.Config{Queue: f.queue, ReplayURL: "http://127.0.0.1:9/Replay",
		ServiceAccount: "tasks@test.iam.gserviceaccount.com", EmulatorHost: addr})
	t.Cleanup(func() { dead.Close() })
	h := reconciler.New(reconciler.Config{TimeBudget: 4 * time.Minute, IOTimeout: 2 * time.Second, Grace: time.Nanosecond},
		reconciler.Deps{Logger: obs.NewLogger(f.logs), Store: f.st, Tasks: dead})
	start := time.Now()
	rep, err := h.Run(f.ctx, false)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if d := time.Since(start); d > runBound {
		t.Fatalf("Run with Cloud Tasks unreachable took %v; each call must end within IOTimeout", d)
	}
	var tasksSec *audit.Section
	for _, s := range rep.Sections {
		if s.Name == reconciler.SectionTasks {
			tasksSec = s
		}
	}
	if tasksSec == nil || tasksSec.Status != audit.StatusError {
		t.Fatalf("tasks section = %+v, want status error", tasksSec)
	}
	if rep.Repairs.Done != 0 {
		t.Fatalf("repairs done = %d with Cloud Tasks unreachable, want 0", rep.Repairs.Done)
	}
	if got := f.get(entry(1, "acme", store.Scheduled).ID).Status; got != store.Scheduled {
		t.Fatalf("entry status = %s, want scheduled (unchanged)", got)
	}
}

// Documents edited by hand into states no component writes: an unknown
// status, a wrong-typed field, a broken lease and state, a breaker with a
// string for its failures. A run must not crash, must say what it could not
// read, and must leave the documents as they are.
func TestHandEditedDocumentsAreReportedNotFatal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	good := f.seed(f.st, entry(1, "acme", store.Scheduled))
	odd := f.seed(f.st, entry(2, "acme", store.Scheduled))
	typed := f.seed(f.st, entry(3, "acme", store.Replayed))
	ctx := f.ctx
	col := f.fs.Collection(store.FailureLog)
	if _, err := col.Doc(odd.ID).Update(ctx, []firestore.Update{{Path: "status", Value: "exploded"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := col.Doc(typed.ID).Update(ctx, []firestore.Update{{Path: "replays", Value: "many"}, {Path: "created_at", Value: 17}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.fs.Collection(store.Audits).Doc(store.AuditState).Set(ctx, map[string]any{"cursors": "not a map", "resume": 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.fs.Collection(store.Breakers).Doc("acme").Set(ctx, map[string]any{"state": "open", "failures": "x"}); err != nil {
		t.Fatal(err)
	}
	h := f.handler(reconciler.Config{Grace: time.Nanosecond}, nil)
	rep, err := h.Run(ctx, false)
	if err != nil && !errors.Is(err, reconciler.ErrLeaseHeld) && rep == nil {
		t.Fatalf("Run over hand-edited documents = %v, want a report", err)
	}
	if rep == nil {
		t.Fatalf("Run returned no report: %v", err)
	}
	if len(rep.Errors) == 0 {
		t.Fatalf("report has no errors; the unreadable state and documents must be reported")
	}
	t.Logf("reported: %q", rep.Errors)
	if got := f.get(good.ID).Status; got != store.Scheduled {
		t.Errorf("good entry status = %s, want scheduled", got)
	}
	snap, err := col.Doc(odd.ID).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := snap.DataAt("status"); s != "exploded" {
		t.Errorf("hand-edited status = %v; reconcile must not rewrite what it cannot read", s)
	}
	// A second run behaves the same (the state was rewritten readable).
	if rep2, err := h.Run(ctx, false); rep2 == nil {
		t.Fatalf("second Run = %v, want a report", err)
	}
}
