package console_test

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/store"
)

// overviewMaxReads bounds the Firestore documents one overview reads,
// whatever the failure log holds: 8 day rollups of at most 8 shards for
// the current day and 2 for a day reconcile folded (22), the 20 oldest
// waiting entries and the one that says more follow (21), 10 breakers not
// closed and the one more that makes the page count them (11), their count
// (1), the last audit (1): 56.
const overviewMaxReads = 60

// The overview reads a bounded number of documents however many entries
// the week holds (counted by store.Ops, not timed): every day of the week
// has entries on every shard of its rollup while it was the current day,
// their moves on the days after, reconcile's daily fold of the closed days
// (store.CompactDay) and moves after it; more breakers are open and more
// entries wait than the page lists. The page still shows the week's counts
// and says how many breakers there are in all.
func TestOverviewReadsBoundedDocuments(t *testing.T) {
	c := testenv.NewClock(time.Now().UTC().Truncate(24 * time.Hour).Add(-7*24*time.Hour + 9*time.Hour))
	e := newEnv(t, console.LocalAuth("ops@example.com"), console.WithClock(c.Now))
	ctx := testenv.Context(t)
	// The pipeline's writes, at the test's clock (lenient breakers: the
	// week's entries spread over few tenants).
	seeder := store.New(e.fs, store.WithClock(c.Now), store.WithBreaker(store.BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute}))
	n := 0
	record := func(s *store.Store, tenant string, st store.Status) string {
		t.Helper()
		n++
		id := fmt.Sprintf("TASKS.%d", n)
		en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(n), Tenant: tenant, Agent: "writer",
			Kind: "explicit", Category: "transient", ReasonCode: "timeout", Action: "auto_replay", Status: st}
		if _, err := s.Record(ctx, en, "classify"); err != nil {
			t.Fatalf("Record(%s) = %v", id, err)
		}
		return id
	}
	move := func(id string, from, to store.Status) {
		t.Helper()
		if _, err := seeder.Transition(ctx, id, store.Change{From: []store.Status{from}, To: to, By: "test"}); err != nil {
			t.Fatalf("Transition(%s, %s -> %s) = %v", id, from, to, err)
		}
	}
	var yesterday, older []string
	for day := range 8 {
		// Forty entries a day land on every shard of the day's rollup;
		// yesterday's are replayed and recovered today.
		var today []string
		for i := range 40 {
			today = append(today, record(seeder, fmt.Sprintf("t%d", i%5), store.Scheduled))
		}
		for i, id := range yesterday {
			if i%2 == 0 {
				move(id, store.Scheduled, store.Replaying)
				move(id, store.Replaying, store.Replayed)
			} else if day > 1 && i%4 == 1 {
				older = append(older, id) // still scheduled, and in the week
			}
		}
		yesterday = today
		if day < 7 {
			c.Add(24 * time.Hour)
			// Reconcile's first run of the day folds the day that ended.
			if _, err := e.st.CompactDay(ctx, c.Now().Add(-24*time.Hour)); err != nil {
				t.Fatalf("CompactDay() = %v", err)
			}
		}
	}
	// After the folds, moves of older entries again.
	for _, id := range older {
		move(id, store.Scheduled, store.Replaying)
		move(id, store.Replaying, store.Escalated)
	}
	// Thirty more waiting than the page lists, twelve breakers open (the
	// default breaker opens after ten failures).
	for range 30 {
		record(seeder, "waiting", store.AwaitingApproval)
	}
	opener := store.New(e.fs, store.WithClock(c.Now))
	for b := range 12 {
		for range store.DefaultBreaker.Threshold {
			record(opener, fmt.Sprintf("storm-%02d", b), store.Scheduled)
		}
	}
	if err := e.st.SaveAudit(ctx, &audit.Report{Schema: audit.Schema, RunID: "20261121T100000Z-0000001", StartedAt: c.Now(), FinishedAt: c.Now(), Complete: true, Alerts: []string{}}); err != nil {
		t.Fatal(err)
	}

	before := e.st.Ops()
	w := httptest.NewRecorder()
	e.srv.Config.Handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	reads := e.st.Ops().Reads - before.Reads
	body := w.Body.String()
	if w.Code != http.StatusOK {
		t.Fatalf("GET / = %d:\n%s", w.Code, body)
	}
	t.Logf("the overview over %d entries read %d documents", n, reads)
	if reads > overviewMaxReads {
		t.Errorf("GET / read %d documents, want at most %d", reads, overviewMaxReads)
	}
	// The first day's entries are older than the week (it ends with the
	// current hour): 7 days of 40, the waiting and the storms' entries.
	for _, want := range []struct{ what, re string }{
		{"the week's entries waiting approval", `id="waiting-awaiting_approval-168">30<`},
		{"the week's escalated entries", fmt.Sprintf(`id="waiting-escalated-168">%d<`, len(older))},
		{"the breakers counted", `id="breakers-more">10 of 12 breakers`},
		{"the week's dead tasks", fmt.Sprintf(`last 7 days \(%d\)`, n-40)},
	} {
		if !regexp.MustCompile(want.re).MatchString(body) {
			t.Errorf("overview: %s: no match for %s", want.what, want.re)
		}
	}
	if rows := strings.Count(section(t, body, "Waiting for a human"), `<tr><td><a href="/entries/`); rows != 20 {
		t.Errorf("overview lists %d waiting entries, want the oldest 20", rows)
	}
}

// section is the page's <section> whose heading is title.
func section(t *testing.T, body, title string) string {
	t.Helper()
	i := strings.Index(body, "<h2>"+title)
	if i < 0 {
		t.Fatalf("no section %q", title)
	}
	j := strings.Index(body[i:], "</section>")
	return body[i : i+j]
}

// A list page reads the page (one query of the page size and one more,
// which says whether a next page follows) and counts what its filters
// select with one aggregation, never by reading the entries; the count is
// on the page. A lookup reads what it finds and counts nothing.
func TestEntriesListReadsAPageAndACount(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	for i := range console.DefaultPageSize + 10 {
		st := store.Scheduled
		if i%3 == 0 {
			st = store.Escalated
		}
		e.seed(t, []string{"acme", "globex"}[i%2], fmt.Sprintf("TASKS.%d", i+1), st, `{}`)
	}
	h := e.srv.Config.Handler
	get := func(path string) (string, int64) {
		t.Helper()
		before := e.st.Ops()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s = %d:\n%s", path, w.Code, w.Body)
		}
		return w.Body.String(), e.st.Ops().Reads - before.Reads
	}
	first, _ := get("/entries")
	m := nextLink.FindStringSubmatch(first)
	if m == nil {
		t.Fatal("GET /entries has no next link")
	}
	page := console.DefaultPageSize
	tests := []struct {
		name, path string
		reads      int64
		matching   string // "" when the page shows no count
	}{
		{"first page", "/entries", int64(page+1) + 1, "60 matching entries"},
		{"second page", html.UnescapeString(m[1]), 10 + 1, "60 matching entries"},
		{"filtered", "/entries?tenant=acme&status=escalated", 10 + 1, "10 matching entries"},
		{"nothing matches", "/entries?tenant=initech", 1 + 1, "0 matching entries"},
		{"lookup", "/entries?q=TASKS.7", -1, ""},
	}
	for _, tt := range tests {
		body, reads := get(tt.path)
		if tt.reads >= 0 && reads != tt.reads {
			t.Errorf("%s: GET %s read %d documents, want %d (the page and one more, and one count)", tt.name, tt.path, reads, tt.reads)
		}
		got := ""
		if m := matching.FindStringSubmatch(body); m != nil {
			got = m[1]
		}
		if got != tt.matching {
			t.Errorf("%s: GET %s shows %q, want %q", tt.name, tt.path, got, tt.matching)
		}
	}
}

var matching = regexp.MustCompile(`<p id="matching">([^<]*)</p>`)

// The overview's resolution figures are the week's counters in the day
// rollups (store.Outcomes): two transient entries replayed, one recovered
// by itself, one discarded by an operator 6 minutes after its death; one
// permanent discarded by an operator after an hour; one claimed replay
// denied by a gate.
func TestOverviewResolutionFigures(t *testing.T) {
	c := testenv.NewClock(time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour))
	e := newEnv(t, console.LocalAuth("ops@example.com"), console.WithClock(c.Now))
	ctx := testenv.Context(t)
	st := store.New(e.fs, store.WithClock(c.Now))
	record := func(id, category string, status store.Status) {
		t.Helper()
		en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: 1, Tenant: "acme", Agent: "writer",
			Kind: "explicit", Category: category, ReasonCode: "timeout", Action: "auto_replay", Strategy: "backoff", Status: status}
		if _, err := st.Record(ctx, en, "classify"); err != nil {
			t.Fatalf("Record(%s) = %v", id, err)
		}
	}
	move := func(id string, from, to store.Status, role authority.Role) {
		t.Helper()
		c.Add(time.Minute)
		if _, err := st.Transition(ctx, id, store.Change{From: []store.Status{from}, To: to, By: "someone", Role: role}); err != nil {
			t.Fatalf("Transition(%s, %s -> %s) = %v", id, from, to, err)
		}
	}
	record("TASKS.1", "transient", store.Scheduled)
	record("TASKS.2", "transient", store.Scheduled)
	record("TASKS.3", "permanent", store.Escalated)
	for _, id := range []string{"TASKS.1", "TASKS.2"} {
		move(id, store.Scheduled, store.Replaying, "")
		move(id, store.Replaying, store.Replayed, "")
	}
	move("TASKS.1", store.Replayed, store.Recovered, "")
	move("TASKS.2", store.Replayed, store.Discarded, authority.Operator)
	record("TASKS.4", "transient", store.Scheduled)
	move("TASKS.4", store.Scheduled, store.Replaying, "")
	move("TASKS.4", store.Replaying, store.Held, "")
	c.Add(time.Hour)
	move("TASKS.3", store.Escalated, store.Discarded, authority.Operator)

	w := httptest.NewRecorder()
	e.srv.Config.Handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	body := w.Body.String()
	if w.Code != http.StatusOK {
		t.Fatalf("GET / = %d:\n%s", w.Code, body)
	}
	for _, want := range []struct{ what, re string }{
		{"transient auto-resolved", `id="auto-share-transient">50.00 %<`},
		{"permanent auto-resolved", `id="auto-share-permanent">0.00 %<`},
		{"fleet recovery", `id="recovery-all">33.33 % recovered<`},
		{"retry success", `id="retry-success-backoff">50.00 %<`},
		{"denials", `Replays denied by a gate: 1 of 3 claimed \(33.33 %\)`},
		// The operator's redrive 6 minutes after the death, read from
		// its bucket's bound (2^8.5 s).
		{"time to decision", `id="decision-median">≤ 6m2s<`},
	} {
		if !regexp.MustCompile(want.re).MatchString(body) {
			t.Errorf("overview: %s: no match for %s in\n%s", want.what, want.re, section(t, body, "Resolution, last 7 days"))
		}
	}
}
