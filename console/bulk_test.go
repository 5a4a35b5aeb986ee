package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/storetest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

const bulkOperator = "ops@example.com"

// runner starts a console instance's bulk runner on e's store, acting
// through act; stop ends it (as a console shutting down) and waits for it.
func (e *env) runner(t *testing.T, name string, act console.Actions) (stop func()) {
	t.Helper()
	log, _ := testenv.Logger()
	c := console.New(e.st, act, console.LocalAuth(bulkOperator), console.WithLogger(log), console.WithInstance(name),
		console.WithBulkTiming(2*time.Second, 50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.RunBulk(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// seedBulk records the entries the bulk tests redrive: n escalated and n/2
// scheduled of tenant acme (the actions), one held and one discarded (left
// alone), and one escalated entry of globex outside the filter; acme's
// breaker is closed.
func (e *env) seedBulk(t *testing.T, n int) (acts []string) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("TASKS.%d", 100+i)
		e.seed(t, "acme", id, store.Escalated, `{"i":1}`)
		acts = append(acts, id)
	}
	for i := range n / 2 {
		id := fmt.Sprintf("TASKS.%d", 300+i)
		e.seed(t, "acme", id, store.Scheduled, `{"i":2}`)
		acts = append(acts, id)
	}
	e.seed(t, "acme", "TASKS.900", store.Held, `{}`)
	e.seed(t, "acme", "TASKS.901", store.Discarded, `{}`)
	e.seed(t, "globex", "TASKS.902", store.Escalated, `{}`)
	// Recording that many failures of acme opened its breaker (10 in 10
	// minutes); the bulk tests replay through a closed one.
	if _, err := e.op.CloseBreaker(testenv.Context(t), "acme", authority.Actor{Name: "test", Role: authority.Operator}, "seeded entries, not an outage"); err != nil && !errors.Is(err, store.ErrBreakerOverride) {
		t.Fatal(err)
	}
	return acts
}

var runLocation = regexp.MustCompile(`^/bulk/([0-9a-f]{32})\?`)

// confirmBulk plans a bulk redrive of tenant acme in the UI, checks the plan
// and confirms it; it returns the run's id.
func (e *env) confirmBulk(t *testing.T, b *browser, rate string, wantPlan map[string]string) string {
	t.Helper()
	code, body := b.get("/bulk?tenant=acme&rate=" + url.QueryEscape(rate))
	if code != http.StatusOK {
		t.Fatalf("GET /bulk = %d %s", code, body)
	}
	for id, want := range wantPlan {
		m := regexp.MustCompile(`id="` + id + `">([^<]*)<`).FindStringSubmatch(body)
		if m == nil || m[1] != want {
			t.Errorf("plan %s = %v, want %s", id, m, want)
		}
	}
	code, loc, body := b.post("/bulk", url.Values{"csrf": {b.csrf}, "tenant": {"acme"}, "rate": {rate}, "why": {"agents fixed"}})
	m := runLocation.FindStringSubmatch(loc)
	if code != http.StatusSeeOther || m == nil {
		t.Fatalf("POST /bulk = %d %q %s, want a redirect to the run", code, loc, body)
	}
	return m[1]
}

// run reads a bulk run.
func (e *env) run(t *testing.T, id string) *store.BulkRun {
	t.Helper()
	r, err := e.st.GetBulkRun(testenv.Context(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// actedOnce checks that the operator moved every entry of ids exactly once,
// left the others alone, and that one replay of each reached the work
// stream (Cloud Tasks dispatched its task to replay, which published it).
func (e *env) actedOnce(t *testing.T, ids []string, others ...string) {
	t.Helper()
	e.waitPublished(t, uint64(len(ids)))
	for _, id := range ids {
		got, err := e.st.Get(testenv.Context(t), id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, h := range got.History {
			if h.By == bulkOperator {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d transitions by %s, want exactly 1: %+v", id, n, bulkOperator, got.History)
		}
	}
	for _, id := range others {
		got, err := e.st.Get(testenv.Context(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if last := got.History[len(got.History)-1]; last.By == bulkOperator {
			t.Errorf("%s (left alone) was moved by the bulk run: %+v", id, last)
		}
	}
	if got := e.published(t); got != uint64(len(ids)) {
		t.Errorf("work stream holds %d replays, want %d (one per entry acted on)", got, len(ids))
	}
}

// TestBulkRedrivePlanAndRun: the plan page's counts are what the run then
// does, the run page shows the progress, and the JSON progress route
// agrees.
func TestBulkRedrivePlanAndRun(t *testing.T) {
	e := newEnv(t, console.LocalAuth(bulkOperator))
	acts := e.seedBulk(t, 6)
	b := newBrowser(t, e.srv.URL)
	id := e.confirmBulk(t, b, "20", map[string]string{"plan-matched": "11", "plan-acts": "9", "plan-approve": "6", "plan-runnow": "3",
		"plan-held": "1", "plan-nothing": "1", "plan-replays": "9"})
	if r := e.run(t, id); r.State != store.BulkPlanned || r.Actor != bulkOperator || r.Rate != 20 || r.Plan.Acts() != 9 {
		t.Errorf("confirmed run = %s by %s at %g/s acting on %d; want planned by %s at 20/s acting on 9", r.State, r.Actor, r.Rate, r.Plan.Acts(), bulkOperator)
	}
	e.runner(t, "a", e.op)
	testenv.WaitFor(t, 30*time.Second, func() error {
		if r := e.run(t, id); r.State != store.BulkDone {
			return fmt.Errorf("run is %s after %d entries", r.State, r.Progress.Seen)
		}
		return nil
	})
	r := e.run(t, id)
	want := store.RedriveProgress{Cursor: r.Progress.Cursor, Seen: 11, Approved: r.Plan.Approve, RunNow: r.Plan.RunNow,
		LeftAlone: r.Plan.Held + r.Plan.Nothing}
	if diff := cmp.Diff(want, r.Progress); diff != "" {
		t.Errorf("run progress differs from its plan (-plan +run):\n%s", diff)
	}
	e.actedOnce(t, acts, "TASKS.900", "TASKS.901", "TASKS.902")

	code, body := b.get("/bulk/" + id)
	if code != http.StatusOK || !strings.Contains(body, `id="bulk-state">done<`) || !strings.Contains(body, `id="bulk-seen">11<`) || strings.Contains(body, "http-equiv") {
		t.Errorf("run page = %d, want done, 11 passed and no reload:\n%s", code, body)
	}
	code, body = b.get("/bulk/" + id + "/progress")
	var p struct {
		State    store.BulkState
		Progress store.RedriveProgress
	}
	if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil || p.State != store.BulkDone || p.Progress.Approved != 6 {
		t.Errorf("progress = %d %s (%v), want done with 6 approved", code, body, err)
	}
	if code, body := b.get("/bulk/runs"); code != http.StatusOK || !strings.Contains(body, id) {
		t.Errorf("run list = %d, want it to name %s:\n%s", code, id, body)
	}
}

// freezer wraps the operator so that one console instance "dies" at its
// at-th action: before it (the action does not happen) or after it (it
// happened, the instance never recorded it). The frozen call blocks until
// thaw, like a process that stopped; it then returns, as a zombie
// instance would wake up, and must find its lease taken.
//
// Every action that reaches the operator is written in the ledger, which
// both instances share.
type freezer struct {
	*operator.Operator
	at     int32 // 0: never
	after  bool
	n      atomic.Int32
	frozen chan struct{}
	thaw   chan struct{}
	ledger *ledger
}

// ledger counts the actions taken per entry, by all instances.
type ledger struct {
	mu   sync.Mutex
	acts map[string]int
}

func (l *ledger) add(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acts[id]++
}

func (f *freezer) Approve(ctx context.Context, tenant, id string, ed operator.Edits) (*store.Entry, error) {
	return f.do(id, func() (*store.Entry, error) { return f.Operator.Approve(ctx, tenant, id, ed) })
}

func (f *freezer) ReplayNowIn(ctx context.Context, tenant, id string, by authority.Actor, asked operator.Asked) (*store.Entry, error) {
	return f.do(id, func() (*store.Entry, error) { return f.Operator.ReplayNowIn(ctx, tenant, id, by, asked) })
}

func (f *freezer) do(id string, act func() (*store.Entry, error)) (*store.Entry, error) {
	if f.n.Add(1) != f.at {
		f.ledger.add(id)
		return act()
	}
	if !f.after {
		close(f.frozen)
		<-f.thaw
		return nil, errors.New("the instance was killed before acting")
	}
	f.ledger.add(id)
	e, err := act()
	close(f.frozen)
	<-f.thaw
	return e, err
}

// TestBulkRedriveSurvivesRestart kills the console instance working on a
// run mid-way, before or after an action, and lets a new instance resume
// it: every entry is acted on exactly once (one action reaching the
// operator from either instance, one transition by the operator, one
// replay on the work stream, no task left in the replay queue).
//
// Resuming is idempotent because of the run's write-ahead: before each
// action the run document names the entry and its updated_at as listed.
// The new instance claims the run only once the dead one's lease expired,
// and settles that entry first: unchanged, the action did not happen and is
// done now; changed with a transition by the run's actor since, it
// happened and is counted, not repeated (a second ReplayNow of a scheduled
// entry would run its task again). Everything before the cursor is done and
// never listed again. When the dead instance wakes up, its next save finds
// the lease taken and it stops without acting.
func TestBulkRedriveSurvivesRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after bool
	}{{"killed before acting", false}, {"killed after acting", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, console.LocalAuth(bulkOperator))
			acts := e.seedBulk(t, 6)
			b := newBrowser(t, e.srv.URL)
			id := e.confirmBulk(t, b, "20", nil)

			l := &ledger{acts: map[string]int{}}
			f := &freezer{Operator: e.op, at: 4, after: tc.after, frozen: make(chan struct{}), thaw: make(chan struct{}), ledger: l}
			stopA := e.runner(t, "a", f)
			<-f.frozen
			// Instance a is dead from here on: no heartbeat, no saves.
			go stopA()
			mid := e.run(t, id)
			if mid.Progress.Pending == nil || mid.LeaseOwner != "a" || mid.State != store.BulkRunning {
				t.Fatalf("run when a died: %s, lease %s, pending %v; want running, held by a, an entry in hand", mid.State, mid.LeaseOwner, mid.Progress.Pending)
			}

			e.runner(t, "b", &freezer{Operator: e.op, ledger: l})
			testenv.WaitFor(t, 30*time.Second, func() error {
				if r := e.run(t, id); r.State != store.BulkDone {
					return fmt.Errorf("run is %s after %d entries (lease %s)", r.State, r.Progress.Seen, r.LeaseOwner)
				}
				return nil
			})
			close(f.thaw) // the zombie wakes up, after b finished
			stopA()
			r := e.run(t, id)
			if got := [4]int{r.Progress.Seen, r.Progress.Approved, r.Progress.RunNow, r.Progress.Failed + r.Progress.Skipped}; got != [4]int{11, 6, 3, 0} {
				t.Errorf("resumed run (seen, approved, run now, failed+skipped) = %v, want [11 6 3 0]", got)
			}
			e.actedOnce(t, acts, "TASKS.900", "TASKS.901", "TASKS.902")
			want := map[string]int{}
			for _, id := range acts {
				want[id] = 1
			}
			if diff := cmp.Diff(want, l.acts); diff != "" {
				t.Errorf("actions taken per entry by both instances (-want +got):\n%s", diff)
			}
			// Every replay task is dispatched and gone: no task of a
			// second action waits in the queue.
			e.ct.WaitDrained(t, e.queue)
		})
	}
}

// holdBeforeRun is the operator, but the breaker holds each scheduled
// entry just before the run asks to replay it now (as an open breaker does
// to an entry whose replay comes up meanwhile).
type holdBeforeRun struct {
	*operator.Operator
	st *store.Store
}

func (h holdBeforeRun) ReplayNowIn(ctx context.Context, tenant, id string, by authority.Actor, asked operator.Asked) (*store.Entry, error) {
	if _, err := storetest.Refuse(ctx, h.st, id, store.Held, "replay", "tenant breaker open"); err != nil {
		return nil, err
	}
	return h.Operator.ReplayNowIn(ctx, tenant, id, by, asked)
}

// An entry a run listed as scheduled and that a breaker holds before the
// run gets to it is skipped, not released: a redrive never releases held
// entries (only their breaker does), and a page is listed once and acted
// on at the run's rate, so long after for a slow one.
func TestBulkRunSkipsWhatChangedSinceListed(t *testing.T) {
	e := newEnv(t, console.LocalAuth(bulkOperator))
	e.seedBulk(t, 2) // TASKS.300 is the one scheduled entry
	b := newBrowser(t, e.srv.URL)
	id := e.confirmBulk(t, b, "20", nil)
	e.runner(t, "a", holdBeforeRun{Operator: e.op, st: e.st})
	testenv.WaitFor(t, 30*time.Second, func() error {
		if r := e.run(t, id); r.State != store.BulkDone {
			return fmt.Errorf("run %s is %s", id, r.State)
		}
		return nil
	})
	r := e.run(t, id)
	if r.Progress.RunNow != 0 || r.Progress.Skipped != 1 || r.Progress.Approved != 2 {
		t.Errorf("progress = %+v, want 2 approved, the scheduled entry skipped", r.Progress)
	}
	got, err := e.st.Get(testenv.Context(t), "TASKS.300")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != store.Held {
		t.Errorf("TASKS.300 = %s, want still held (history %+v)", got.Status, got.History[len(got.History)-1])
	}
}

// TestBulkRedriveCancel: cancel stops the run at the next entry; what it
// A run acts on the entries recorded up to its confirmation, however late a
// runner gets to it: failures recorded meanwhile (among them the deaths of
// an earlier run's replays, or a double-submitted confirmation's) match its
// filter but are not the plan the operator confirmed.
func TestBulkRunEndsAtItsConfirmation(t *testing.T) {
	e := newEnv(t, console.LocalAuth(bulkOperator))
	acts := e.seedBulk(t, 2)
	b := newBrowser(t, e.srv.URL)
	id := e.confirmBulk(t, b, "20", nil)
	var late []string
	for i := range 3 {
		late = append(late, fmt.Sprintf("TASKS.%d", 700+i))
		e.seed(t, "acme", late[i], store.Escalated, `{"late":1}`)
	}
	e.runner(t, "a", e.op)
	testenv.WaitFor(t, 30*time.Second, func() error {
		if r := e.run(t, id); r.State != store.BulkDone {
			return fmt.Errorf("run %s is %s", id, r.State)
		}
		return nil
	})
	e.actedOnce(t, acts, late...)
	r := e.run(t, id)
	if r.Progress.Approved+r.Progress.RunNow != r.Plan.Acts() || r.Progress.Seen > r.Total {
		t.Errorf("run did %d actions over %d entries, want its plan's %d over at most %d", r.Progress.Approved+r.Progress.RunNow, r.Progress.Seen, r.Plan.Acts(), r.Total)
	}
}

// had not reached stays untouched.
func TestBulkRedriveCancel(t *testing.T) {
	e := newEnv(t, console.LocalAuth(bulkOperator))
	e.seedBulk(t, 10)
	b := newBrowser(t, e.srv.URL)
	id := e.confirmBulk(t, b, "1/s", nil)
	e.runner(t, "a", e.op)
	testenv.WaitFor(t, 30*time.Second, func() error {
		if r := e.run(t, id); r.Progress.Approved < 1 {
			return fmt.Errorf("run is %s, %d approved", r.State, r.Progress.Approved)
		}
		return nil
	})
	if _, body := b.get("/bulk/" + id); !strings.Contains(body, `id="bulk-cancel"`) || !strings.Contains(body, `http-equiv="refresh"`) {
		t.Errorf("a running run's page lacks the cancel button or its reload:\n%s", body)
	}
	code, loc, _ := b.post("/bulk/"+id+"/cancel", url.Values{"csrf": {b.csrf}})
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/bulk/"+id) {
		t.Fatalf("cancel = %d %q", code, loc)
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if r := e.run(t, id); r.State != store.BulkCancelled {
			return fmt.Errorf("run is %s", r.State)
		}
		return nil
	})
	r := e.run(t, id)
	if r.Progress.Pending != nil || r.LeaseOwner != "" || r.CancelledBy != bulkOperator || r.Progress.Seen >= r.Total {
		t.Errorf("cancelled run: pending %v, lease %q, cancelled by %q, %d of %d passed; want no entry in hand, no lease, by %s, stopped early",
			r.Progress.Pending, r.LeaseOwner, r.CancelledBy, r.Progress.Seen, r.Total, bulkOperator)
	}
	// Exactly the entries the run counted were moved by the operator.
	p, err := e.st.Entries(testenv.Context(t), store.Query{Tenant: "acme", View: store.ScanView, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, en := range p.Entries {
		for _, h := range en.History {
			if h.By == bulkOperator {
				moved++
			}
		}
	}
	if moved != r.Progress.Approved+r.Progress.RunNow {
		t.Errorf("%d transitions by the operator, the cancelled run counted %d", moved, r.Progress.Approved+r.Progress.RunNow)
	}
	// A second cancel changes nothing; a cancelled run stays cancelled.
	if code, _, _ := b.post("/bulk/"+id+"/cancel", url.Values{"csrf": {b.csrf}}); code != http.StatusSeeOther {
		t.Errorf("second cancel = %d, want 303", code)
	}
	if again := e.run(t, id); again.State != store.BulkCancelled || again.Progress != r.Progress {
		t.Errorf("after a second cancel: %s %+v, want cancelled %+v", again.State, again.Progress, r.Progress)
	}
}

// TestBulkRedriveBadInput: bad filters, rates, run ids and a missing CSRF
// token are refused with a clear 400/403/404, and nothing changes: no run
// is stored, no entry, task or stream message moves.
func TestBulkRedriveBadInput(t *testing.T) {
	e := newEnv(t, console.LocalAuth(bulkOperator))
	e.seedBulk(t, 2)
	b := newBrowser(t, e.srv.URL)
	b.get("/bulk?tenant=acme") // the plan page sets the CSRF cookie and shows its token
	before := e.snapshot(t)
	valid := func(kv ...string) url.Values {
		v := url.Values{"csrf": {b.csrf}, "tenant": {"acme"}, "rate": {"5"}, "why": {"test"}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				v.Del(kv[i])
			} else {
				v.Set(kv[i], kv[i+1])
			}
		}
		return v
	}
	forged := strings.Repeat("0", 32)
	for _, tc := range []struct {
		name   string
		method string
		path   string
		form   url.Values
		code   int
		says   string
	}{
		{"unknown filter", "GET", "/bulk?tenant=acme&colour=red", nil, 400, "unknown filter"},
		{"no filter", "GET", "/bulk?rate=5", nil, 400, "needs a filter"},
		{"unknown status", "GET", "/bulk?status=lost", nil, 400, "unknown status"},
		{"bad time", "GET", "/bulk?tenant=acme&from=yesterday", nil, 400, "from"},
		{"unknown opt-in", "GET", "/bulk?tenant=acme&include=everything", nil, 400, "the one opt-in is approver-rules"},
		{"an opt-in of before, by category", "GET", "/bulk?tenant=acme&include=governance", nil, 400, "the one opt-in is approver-rules"},
		{"rate 0", "GET", "/bulk?tenant=acme&rate=0", nil, 400, "rate"},
		{"negative rate", "GET", "/bulk?tenant=acme&rate=-3", nil, 400, "rate"},
		{"huge rate", "GET", "/bulk?tenant=acme&rate=21", nil, 400, "at most 20"},
		{"NaN rate", "GET", "/bulk?tenant=acme&rate=NaN", nil, 400, "rate"},
		{"rate unit", "GET", "/bulk?tenant=acme&rate=5/h", nil, 400, "rate"},
		{"confirm without CSRF", "POST", "/bulk", valid("csrf", ""), 403, "CSRF"},
		{"confirm with a forged CSRF", "POST", "/bulk", valid("csrf", "AAAA"), 403, "CSRF"},
		{"confirm rate 0", "POST", "/bulk", valid("rate", "0"), 400, "rate"},
		{"confirm huge rate", "POST", "/bulk", valid("rate", "1e9"), 400, "at most 20"},
		// 1e-10/s overflowed the bucket's interval: the run went unthrottled.
		{"confirm a rate below one an hour", "POST", "/bulk", valid("rate", "1e-10"), 400, "at least one an hour"},
		{"confirm a tiny rate a minute", "POST", "/bulk", valid("rate", "6e-9/m"), 400, "at least one an hour"},
		{"confirm unknown filter", "POST", "/bulk", valid("colour", "red"), 400, "unknown filter"},
		{"confirm without a reason", "POST", "/bulk", valid("why", ""), 400, "reason"},
		{"confirm nothing to do", "POST", "/bulk", valid("tenant", "nobody"), 400, "nothing to do"},
		{"forged run id", "GET", "/bulk/..%2F..%2Fentries%2FTASKS.100", nil, 400, "malformed bulk run id"},
		{"malformed run id", "GET", "/bulk/ZZZ", nil, 400, "malformed bulk run id"},
		{"unknown run id", "GET", "/bulk/" + forged, nil, 404, "not found"},
		{"progress of a malformed id", "GET", "/bulk/x/progress", nil, 400, `"invalid_argument"`},
		{"progress of an unknown id", "GET", "/bulk/" + forged + "/progress", nil, 404, `"not_found"`},
		{"cancel a malformed id", "POST", "/bulk/" + strings.Repeat("g", 32) + "/cancel", url.Values{"csrf": {b.csrf}}, 400, "malformed"},
		{"cancel an unknown id", "POST", "/bulk/" + forged + "/cancel", url.Values{"csrf": {b.csrf}}, 404, "not found"},
		{"cancel without CSRF", "POST", "/bulk/" + forged + "/cancel", url.Values{}, 403, "CSRF"},
	} {
		var code int
		var body string
		if tc.method == "GET" {
			code, body = b.get(tc.path)
		} else {
			code, _, body = b.post(tc.path, tc.form)
		}
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %s %s = %d, want %d saying %q:\n%.300s", tc.name, tc.method, tc.path, code, tc.code, tc.says, body)
		}
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("refused requests changed entries, tasks or the stream (-before +after):\n%s", diff)
	}
	if runs, err := e.st.ListBulkRuns(testenv.Context(t), 10); err != nil || len(runs) != 0 {
		t.Errorf("refused requests stored %d bulk runs (%v), want none", len(runs), err)
	}
}

// TestBrowserBulkRedrive runs a bulk redrive in a real chromium (newChrome,
// browser_test.go): from the filtered entries list to its plan, a lower
// rate, the confirmation, and the run page reloading itself until the run
// is done.
func TestBrowserBulkRedrive(t *testing.T) {
	c := newChrome(t)
	e := newEnv(t, console.LocalAuth(bulkOperator))
	acts := e.seedBulk(t, 4)
	e.runner(t, "a", e.op)
	base := e.srv.URL

	c.do("filter the entries", chromedp.Navigate(base+"/entries?tenant=acme"), chromedp.WaitVisible(chromedp.ID("bulk")))
	c.do("open the plan", chromedp.Click(chromedp.ID("bulk")), chromedp.WaitVisible(chromedp.ID("bulk-plan")))
	c.do("lower the rate",
		chromedp.Clear(chromedp.ID("bulk-rate-plan")),
		chromedp.SendKeys(chromedp.ID("bulk-rate-plan"), "2/s"),
		// The old plan's button stays visible until the new page replaces
		// it: mark the old page and wait for a button on an unmarked one.
		chromedp.Evaluate[chromedp.Void](`document.body.dataset.replaced = "1"`),
		chromedp.Click(chromedp.ID("replan")),
		chromedp.WaitVisible(chromedp.CSS(`body:not([data-replaced]) #bulk-confirm`)),
	)
	if f, acts := c.text("read the filter", "#bulk-filter"), c.text("read the plan", "#plan-acts"); f != "tenant=acme" || acts != "6" {
		t.Errorf("plan of %q acts on %s, want tenant=acme acting on 6", f, acts)
	}
	if b := c.text("read the button", "#bulk-confirm"); !strings.Contains(b, "at 2/s") {
		t.Errorf("confirm button %q, want the rate 2/s", b)
	}
	c.shot("bulk-plan")

	c.do("confirm",
		chromedp.SendKeys(chromedp.ID("bulk-why"), "the rate limit was lifted"),
		chromedp.Click(chromedp.ID("bulk-confirm")),
		chromedp.WaitVisible(chromedp.ID("bulk-state")),
	)
	// The page reloads itself while the run goes on; read what it shows.
	var seen []string
	testenv.WaitFor(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		st, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("bulk-state")))
		if err != nil {
			return err // mid-reload
		}
		n, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("bulk-seen")))
		if s := st + " " + n; len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if st != string(store.BulkDone) {
			return fmt.Errorf("run page shows %s", st)
		}
		return nil
	})
	t.Logf("the run page showed, reload after reload: %q", seen)
	if got := c.text("read the counts", "#bulk-counts"); !strings.Contains(got, "approved 4, run now 2") || !strings.Contains(got, "failed 0") {
		t.Errorf("run page counts %q, want 4 approved, 2 run now, none failed", got)
	}
	c.shot("bulk")
	e.actedOnce(t, acts, "TASKS.900", "TASKS.901", "TASKS.902")
}
