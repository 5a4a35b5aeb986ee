package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// openBreaker opens tenant's breaker the way classify does: one failure
// recorded by a store whose threshold is 1. The filler entry it records is
// discarded, so redrive has nothing to do with it.
func (e *env) openBreaker(tenant string) {
	e.t.Helper()
	ctx := testenv.Context(e.t)
	opener := store.New(e.fs, store.WithBreaker(store.BreakerConfig{Threshold: 1, Window: time.Hour, Cooldown: time.Hour}))
	id := "FILLER." + tenant
	filler := &store.Entry{ID: id, EventID: id, Stream: "FILLER", StreamSeq: 1, Subject: "agents.x.tasks.y", Tenant: tenant,
		Kind: "explicit", Status: store.Discarded}
	if _, err := opener.Record(ctx, filler, "classify"); err != nil {
		e.t.Fatal(err)
	}
	if b, err := e.st.GetBreaker(ctx, tenant); err != nil || b.State != store.BreakerOpen {
		e.t.Fatalf("breaker of %s = %+v, %v; want open", tenant, b, err)
	}
}

// completeTask writes the completion record agentkit.Once leaves for
// tenant's task with key.
func (e *env) completeTask(tenant, key string) {
	e.t.Helper()
	ctx := testenv.Context(e.t)
	rec := agentkit.IdempotencyRecord{Key: key, Tenant: tenant, Status: agentkit.StatusCompleted, CompletedAt: time.Now().UTC()}
	if _, err := e.fs.Collection(store.TaskIdempotency).Doc(agentkit.IdempotencyDocID(tenant, key)).Set(ctx, rec); err != nil {
		e.t.Fatal(err)
	}
}

// withFailure records a scheduled entry whose failure record names code:
// what the current policy says of its replay.
func (e *env) seedScheduled(id, tenant, code string) {
	e.t.Helper()
	ctx := testenv.Context(e.t)
	en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: 1, Subject: "agents.backend.tasks.code_review", Tenant: tenant,
		Agent: "backend", TaskID: "task-" + id, TaskType: "code_review", IdempotencyKey: "task-" + id + "-v1", Kind: "explicit",
		Category: "transient", ReasonCode: "timeout", Action: "auto_replay", Strategy: "transient", Status: store.Scheduled,
		Payload: []byte("{}"), TaskName: tasks.Name(id, 1), NextRetryAt: time.Now().Add(time.Hour),
		Failure: &event.Failure{Code: code, Detail: "test", Agent: "backend"}}
	if _, err := e.st.Record(ctx, en, "test"); err != nil {
		e.t.Fatalf("Record(%s) = %v", id, err)
	}
	if _, _, err := e.sched.Schedule(ctx, tasks.Request{EntryID: id, Attempt: 1, At: en.NextRetryAt}); err != nil {
		e.t.Fatalf("Schedule(%s) = %v", id, err)
	}
}

// planFigure reads the figure of a plan line ("  approve  4  …").
func planFigure(t *testing.T, out, label string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(label) + ` +(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("plan has no line %q:\n%s", label, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestRedrivePlan checks the plan against a mix of entries — every action,
// every reason to leave an entry alone, every gate — and that running it
// does what it said: held entries stay held, excluded categories are
// untouched until their flag is given, and nothing runs unconfirmed.
func TestRedrivePlan(t *testing.T) {
	e := newEnv(t)
	e.openBreaker("globex")
	e.seed(
		seed{id: "R.1", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated},
		seed{id: "R.2", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated},
		seed{id: "R.3", tenant: "acme", agent: "backend", category: "governance", reason: "denied", status: store.AwaitingApproval},
		seed{id: "R.4", tenant: "acme", agent: "backend", category: "poison", reason: "parse_error", status: store.Quarantined},
		seed{id: "R.5", tenant: "acme", agent: "backend", category: "unknown_commit_state", reason: "partial_external_write", status: store.AwaitingApproval},
		seed{id: "R.6", tenant: "acme", agent: "backend", category: "transient", reason: "timeout", status: store.Held},
		seed{id: "R.9", tenant: "acme", agent: "backend", category: "transient", reason: "timeout", status: store.Discarded},
		seed{id: "G.1", tenant: "globex", agent: "cto", category: "permanent", reason: "impossible_task", status: store.Escalated},
		seed{id: "G.2", tenant: "globex", agent: "cto", category: "permanent", reason: "impossible_task", status: store.Escalated},
	)
	e.completeTask("acme", "task-R.1-v1")
	// Another tenant's completion of G.2's key is not G.2's: the gate
	// still counts one completed task.
	e.completeTask("acme", "task-G.2-v1")
	e.seedScheduled("R.7", "acme", "authority_exceeded") // the policy now escalates it
	e.seedScheduled("R.8", "acme", "timeout")            // the policy replays it
	vars := map[string]string{"DLQCTL_ACTOR": "redriver"}
	args := []string{"redrive", "--filter", "since=1h", "--rate", "100/s"}

	code, out, stderr := e.run(vars, append(args, "--dry-run")...)
	if code != 0 {
		t.Fatalf("dry run = %d %q", code, stderr)
	}
	t.Logf("dlqctl %s --dry-run:\n%s", strings.Join(args, " "), out)
	for _, want := range []string{"entries matching: 12", "by status    escalated 4", "by tenant    acme 9, globex 3", "dry run: nothing changed",
		"globex open since", "→ escalated 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	for label, want := range map[string]int{
		"approve": 4, "run now": 2, // the actions
		"held": 1, "excluded: governance": 1, "excluded: poison": 1, "excluded: unknown_commit_state": 1, "nothing to do": 2,
		"already completed": 1, "stopped by the policy": 1, "held by a breaker": 2, "replayed": 2, // the gates
	} {
		if got := planFigure(t, out, label); got != want {
			t.Errorf("plan %q = %d, want %d", label, got, want)
		}
	}

	// No terminal, no --yes: refused before anything is read or changed.
	if code, _, stderr := e.run(vars, args...); code != exitUsage || !strings.Contains(stderr, "--yes") {
		t.Errorf("redrive without a terminal or --yes = %d %q, want %d naming --yes", code, stderr, exitUsage)
	}
	// On a terminal, anything but yes changes nothing.
	tty := func(answer string) func(*app) {
		return func(a *app) { a.stdinTTY = func() bool { return true }; a.stdin = strings.NewReader(answer) }
	}
	code, out, stderr = e.runCtx(context.Background(), vars, tty("n\n"), args...)
	if code != exitError || !strings.Contains(stderr, "[y/N]") || !strings.Contains(stderr, "not confirmed") || !strings.Contains(out, "redrive plan") {
		t.Errorf("redrive answered n = %d, %q, %q; want the plan, the question and exit 1", code, out, stderr)
	}
	if got := e.entry("R.2"); got.Status != store.Escalated {
		t.Fatalf("a declined redrive changed R.2 to %s", got.Status)
	}

	// A held filter has nothing to do: held entries wait for their breaker.
	code, out, _ = e.run(vars, "redrive", "--filter", "status=held", "--rate", "100/s", "--yes")
	if code != 0 || !strings.Contains(out, "nothing to do") || planFigure(t, out, "held") != 1 {
		t.Errorf("redrive --filter status=held = %d:\n%s\nwant nothing to do, 1 held", code, out)
	}

	cp := filepath.Join(t.TempDir(), "plan.json")
	// A failure recorded while the question waits matches the filter but
	// is not the plan the operator answered: the redrive leaves it.
	late := func(a *app) {
		a.stdinTTY = func() bool { return true }
		a.stdin = &beforeRead{fn: func() {
			e.seed(seed{id: "R.10", tenant: "initech", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated})
		}, r: strings.NewReader("y\n")}
	}
	code, out, stderr = e.runCtx(context.Background(), vars, late, append(args, "--checkpoint", cp)...)
	if code != 0 || !strings.Contains(out, "redrive complete: 4 approved, 2 run now, 0 skipped, 0 failed, 6 left alone") {
		t.Fatalf("confirmed redrive = %d:\n%s\n%s", code, out, stderr)
	}
	want := map[string]store.Status{"R.1": store.Scheduled, "R.2": store.Scheduled, "G.1": store.Scheduled, "G.2": store.Scheduled,
		"R.7": store.Scheduled, "R.8": store.Scheduled, // run now: the gates meet them when the task runs
		"R.3": store.AwaitingApproval, "R.4": store.Quarantined, "R.5": store.AwaitingApproval, "R.6": store.Held, "R.9": store.Discarded,
		"R.10": store.Escalated}
	for id, st := range want {
		got := e.entry(id)
		if got.Status != st {
			t.Errorf("%s after the redrive = %s, want %s", id, got.Status, st)
		}
		if by := got.History[len(got.History)-1].By; (st == store.Scheduled) != (by == "redriver") {
			t.Errorf("%s: last transition by %s; redrive acted on it: %v", id, by, st == store.Scheduled)
		}
	}

	// The entries kept for approvers go only with the opt-in; dlqctl acts
	// as an approver, so it approves them, and the history says so.
	code, out, _ = e.run(vars, "redrive", "--filter", "tenant=acme", "--rate", "100/s", "--include-approver-rules", "--yes", "--checkpoint", filepath.Join(t.TempDir(), "approver.json"))
	if code != 0 || planFigure(t, out, "approve") != 3 || !strings.Contains(out, "--include-approver-rules given") {
		t.Errorf("redrive --include-approver-rules = %d:\n%s\nwant 3 approvals", code, out)
	}
	for _, id := range []string{"R.3", "R.4", "R.5"} {
		got := e.entry(id)
		if last := got.History[len(got.History)-1]; got.Status != store.Scheduled || last.Actor() != (authority.Actor{Name: "redriver", Role: authority.Approver}) {
			t.Errorf("%s after --include-approver-rules = %s by %s, want scheduled by redriver (approver)", id, got.Status, last.Actor())
		}
	}
}

// TestRedriveResumes interrupts a redrive after 4 entries (the context is
// cancelled, as Ctrl-C does), resumes it from the checkpoint, and checks
// that every entry was approved exactly once.
func TestRedriveResumes(t *testing.T) {
	e := newEnv(t)
	const n = 10
	for i := 1; i <= n; i++ {
		e.seed(seed{id: fmt.Sprintf("TASKS.%d", 100+i), tenant: fmt.Sprintf("t%d", i%3), agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated})
	}
	e.seed(seed{id: "TASKS.200", tenant: "t0", agent: "backend", category: "poison", reason: "parse_error", status: store.Quarantined})
	cp := filepath.Join(t.TempDir(), "redrive.json")

	// Dry run: the plan, nothing changed.
	code, out, _ := e.run(nil, "redrive", "--filter", "status=escalated", "--rate", "100/s", "--dry-run")
	if code != 0 || planFigure(t, out, "approve") != n || !strings.Contains(out, "nothing changed") {
		t.Fatalf("dry run = %d:\n%s", code, out)
	}
	if got := e.entry("TASKS.101"); got.Status != store.Escalated {
		t.Fatalf("dry run changed TASKS.101 to %s", got.Status)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code, _, stderr := e.runCtx(ctx, nil, func(a *app) {
		a.afterRedriveItem = func(done int) {
			if done == 4 {
				cancel()
			}
		}
	}, "redrive", "--filter", "status=escalated,category=permanent", "--rate", "50/s", "--checkpoint", cp, "--yes")
	if code != exitPartial {
		t.Fatalf("interrupted redrive = exit %d, want %d; stderr %q", code, exitPartial, stderr)
	}
	if strings.Contains(stderr, "\r[") || !strings.Contains(stderr, "redrive: 4/10") {
		t.Errorf("redrive without a terminal should print plain lines, got %q", stderr)
	}
	if want := "resume with: dlqctl redrive --resume " + cp; !strings.Contains(stderr, want) {
		t.Errorf("interrupted redrive stderr %q lacks %q", stderr, want)
	}
	saved, err := loadCheckpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Seen != 4 || saved.Approved != 4 || saved.Pending != nil || saved.Complete {
		t.Errorf("checkpoint after interruption: seen %d approved %d pending %v complete %v, want 4, 4, nil, false", saved.Seen, saved.Approved, saved.Pending, saved.Complete)
	}

	// The resumed run shows the rest of the plan and draws a progress bar,
	// as on a terminal.
	code, out, stderr = e.runCtx(context.Background(), nil, func(a *app) { a.isTTY = func() bool { return true } }, "redrive", "--resume", cp, "--yes")
	if !strings.Contains(stderr, "\r[") || !strings.Contains(stderr, "10/10") {
		t.Errorf("resumed redrive on a terminal drew no bar ending at 10/10: %q", stderr)
	}
	if code != 0 {
		t.Fatalf("resumed redrive = %d, %q %q", code, out, stderr)
	}
	if !strings.Contains(out, "resuming: 4 entries passed") || planFigure(t, out, "approve") != n-4 {
		t.Errorf("resumed redrive's plan = %q, want the 6 left", out)
	}
	if !strings.Contains(out, "redrive complete: 10 approved, 0 run now, 0 skipped, 0 failed, 0 left alone") {
		t.Errorf("resumed redrive printed %q, want 10 in all (4 before the interruption, 6 after)", out)
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("TASKS.%d", 100+i)
		got := e.entry(id)
		approvals := 0
		for _, h := range got.History {
			if strings.HasPrefix(h.Note, store.ApprovalNote) {
				approvals++
			}
		}
		if approvals != 1 || got.Status != store.Scheduled {
			t.Errorf("%s after the redrive: status %s, %d approvals; want scheduled, exactly 1", id, got.Status, approvals)
		}
	}
	e.waitDispatchedOnce(n)
	if got := e.entry("TASKS.200"); got.Status != store.Quarantined {
		t.Errorf("the quarantined entry outside the filter became %s", got.Status)
	}
	// Resuming a finished redrive does nothing.
	if code, out, _ := e.run(nil, "redrive", "--resume", cp); code != 0 || !strings.Contains(out, "complete") {
		t.Errorf("resume of a complete redrive = %d %q", code, out)
	}
	for _, bad := range [][]string{
		{"redrive", "--rate", "5/s"},
		{"redrive", "--filter", "status=escalated"},
		{"redrive", "--filter", "colour=red", "--rate", "1/s"},
		{"redrive", "--filter", "status=escalated", "--rate", "fast"},
		{"redrive", "--resume", cp, "--include-approver-rules"},
	} {
		if code, _, _ := e.run(nil, bad...); code != exitUsage {
			t.Errorf("dlqctl %v = %d, want %d", bad, code, exitUsage)
		}
	}
}

// waitFor n replay tasks, each dispatched exactly once.
func (e *env) waitDispatchedOnce(n int) {
	e.t.Helper()
	testenv.WaitUntil(e.t, 20*time.Second, fmt.Sprintf("%d replay tasks dispatched", n), func() bool {
		return len(e.target.Deliveries()) >= n
	})
	time.Sleep(200 * time.Millisecond) // a second dispatch would show by now
	got := e.target.Deliveries()
	if len(got) != n {
		e.t.Errorf("%d replay tasks dispatched, want %d", len(got), n)
	}
	for name, k := range got {
		if k != 1 {
			e.t.Errorf("task %s dispatched %d times, want 1", name, k)
		}
	}
}

// killed is the panic a test hook raises to stop a redrive dead, as a kill
// -9 would: nothing after that point runs, no checkpoint is saved.
type killed struct{}

// TestRedriveKilledAndResumed kills a redrive at 20 random points and
// resumes it each time; in the end every entry was acted on exactly once
// (one transition by the redrive's actor in its history, one replay task
// dispatched).
//
// Three kinds of stop, at random item counts (seeded, so reproducible):
//   - Ctrl-C (the context is cancelled): the run saves its checkpoint and
//     exits 5;
//   - a kill right after the write-ahead checkpoint, before the action: on
//     resume the pending entry is unchanged (same updated_at as listed), so
//     it is acted on now, once;
//   - a kill right after the action, before the checkpoint records it: on
//     resume the pending entry has changed and its history holds a
//     transition by this redrive's actor after the listed updated_at, so it
//     is counted and not acted on again.
//
// The retry path is idempotent because of that write-ahead, not the status
// check alone: a second Approve would be ErrWrongStatus, but a second
// ReplayNow of a scheduled entry is scheduled -> scheduled and would run its
// task again, so the resumed run never repeats an action whose entry moved.
func TestRedriveKilledAndResumed(t *testing.T) {
	e := newEnv(t)
	const n = 90
	for i := range n {
		id := fmt.Sprintf("K.%03d", i)
		if i%4 == 0 {
			e.seedScheduled(id, fmt.Sprintf("t%d", i%5), "timeout")
			continue
		}
		e.seed(seed{id: id, tenant: fmt.Sprintf("t%d", i%5), agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated})
	}
	vars := map[string]string{"DLQCTL_ACTOR": "redriver"}
	cp := filepath.Join(t.TempDir(), "kills.json")
	rng := rand.New(rand.NewPCG(20, 26))
	args := []string{"redrive", "--filter", "since=1h", "--rate", "1000/s", "--checkpoint", cp, "--yes"}
	for kill := range 20 {
		at := rng.IntN(4) + 1 // items into this run
		how := rng.IntN(3)
		ctx, cancel := context.WithCancel(context.Background())
		seen0 := -1
		code := func() (code int) {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(killed); !ok {
						panic(r)
					}
					code = -1
				}
			}()
			code, _, stderr := e.runCtx(ctx, vars, func(a *app) {
				a.beforeRedriveAct = func(seen int) {
					if seen0 < 0 {
						seen0 = seen
					}
					if how == 1 && seen-seen0 == at-1 {
						panic(killed{})
					}
				}
				a.afterRedriveItem = func(seen int) {
					if seen-seen0 < at {
						return
					}
					switch how {
					case 0:
						cancel()
					case 2:
						panic(killed{})
					}
				}
			}, args...)
			if code != exitPartial {
				t.Fatalf("kill %d (mode %d at %d): exit %d, stderr %q; want %d", kill, how, at, code, stderr, exitPartial)
			}
			return code
		}()
		cancel()
		_ = code
		args = []string{"redrive", "--resume", cp, "--yes"}
	}
	saved, err := loadCheckpoint(cp)
	if err != nil || saved.Complete || saved.Seen >= n {
		t.Fatalf("after 20 kills: %+v, %v; want an unfinished redrive (more entries)", saved, err)
	}
	code, out, stderr := e.run(vars, args...)
	if code != 0 {
		t.Fatalf("final resume = %d %q %q", code, out, stderr)
	}
	saved, err = loadCheckpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([4]int{n - n/4 - 1, n/4 + 1, 0, 0}, [4]int{saved.Approved, saved.RunNow, saved.Skipped, saved.Failed}); diff != "" {
		t.Errorf("final counters (approved, run now, skipped, failed) (-want +got):\n%s", diff)
	}
	for i := range n {
		id := fmt.Sprintf("K.%03d", i)
		got := e.entry(id)
		acts := 0
		for _, h := range got.History {
			if h.By == "redriver" {
				acts++
			}
		}
		if acts != 1 {
			t.Errorf("%s: %d transitions by the redrive, want exactly 1: %+v", id, acts, got.History)
		}
	}
	e.waitDispatchedOnce(n)
}

// TestCheckpointSize drives the checkpoint writer through a redrive of
// 50 000 simulated entries (a write-ahead save per entry, as the run does)
// and counts the bytes written: every save is the same size give or take
// the digits of the counters, so the total grows linearly, not with the
// square of the run as a done-list does.
func TestCheckpointSize(t *testing.T) {
	const n = 50_000
	// The saves go to memory (50 000 renames take most of a minute on a
	// busy disk); the last one goes to the file and is read back.
	var disk []byte
	w := &checkpointFile{path: filepath.Join(t.TempDir(), "cp.json"), write: func(_ string, b []byte) error { disk = b; return nil }}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cp := &checkpoint{Schema: checkpointSchema, Filter: filter{store.BulkFilter{Tenant: "acme", Status: store.Escalated, CreatedFrom: start.Add(-6 * time.Hour)}},
		Rate: 50, By: "dlqctl:alice", Total: n, StartedAt: start}
	first, biggest := 0, 0
	for i := range n {
		// Entry ids of realistic length: <stream>.<sequence>.
		at := store.Cursor{At: start.Add(-time.Duration(i) * time.Second), ID: fmt.Sprintf("AGENT_TASKS.%d", 9_000_000_000+i)}
		cp.Pending = &pending{At: at, Action: actApprove, UpdatedAt: at.At.Add(time.Minute)}
		cp.UpdatedAt = start.Add(time.Duration(i) * 20 * time.Millisecond)
		if err := w.save(cp); err != nil {
			t.Fatal(err)
		}
		if i == 1 { // the first save with a cursor
			first = w.last
		}
		biggest = max(biggest, w.last)
		cp.Pending, cp.Cursor = nil, at
		cp.Seen++
		cp.Approved++
	}
	cp.Complete = true
	w.write = nil
	if err := w.save(cp); err != nil {
		t.Fatal(err)
	}
	if len(disk) == 0 {
		t.Fatal("the saves wrote nothing")
	}
	if biggest > first+32 || biggest > 1024 {
		t.Errorf("checkpoint saves grew from %d to %d bytes; want constant size (at most 32 bytes of counter digits more, under 1 KiB)", first, biggest)
	}
	if limit := int64(n+1) * int64(biggest); w.written > limit {
		t.Errorf("%d saves wrote %d bytes, more than %d saves of %d bytes", n+1, w.written, n+1, biggest)
	}
	got, err := loadCheckpoint(w.path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cp, got); diff != "" {
		t.Errorf("loadCheckpoint(saved) (-want +got):\n%s", diff)
	}
	t.Logf("checkpoint of a redrive over %d entries: %d saves, %d–%d bytes each, %d bytes written in all", n, n+1, first, biggest, w.written)
}

// beforeRead runs fn once, before its first read (an answer typed while
// the world goes on).
type beforeRead struct {
	once sync.Once
	fn   func()
	r    io.Reader
}

func (b *beforeRead) Read(p []byte) (int, error) {
	b.once.Do(b.fn)
	return b.r.Read(p)
}

// dlqctl reads LEGACY_COMPLETIONS_UNTIL when it builds its store: a
// malformed value is refused before anything is read, naming the variable;
// a time is taken.
func TestLegacyCompletionsUntilSetting(t *testing.T) {
	e := newEnv(t)
	e.seed(seed{id: "R.1", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated})
	ownStore := func(a *app) { a.st = nil }
	for _, tc := range []struct {
		value string
		code  int
		want  string
	}{
		{"after the upgrade", exitError, `LEGACY_COMPLETIONS_UNTIL: "after the upgrade" is not an RFC 3339 time`},
		{"2026-12-01T00:00:00Z", exitOK, "R.1"},
	} {
		vars := map[string]string{"GOOGLE_CLOUD_PROJECT": "p", "LEGACY_COMPLETIONS_UNTIL": tc.value}
		code, out, stderr := e.runCtx(context.Background(), vars, ownStore, "ls")
		if code != tc.code || !strings.Contains(out+stderr, tc.want) {
			t.Errorf("LEGACY_COMPLETIONS_UNTIL=%q dlqctl ls = %d, %q, %q; want %d naming %q", tc.value, code, out, stderr, tc.code, tc.want)
		}
	}
}
