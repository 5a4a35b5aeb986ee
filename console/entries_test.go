package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

var entryRow = regexp.MustCompile(`<tr><td><a href="/entries/([^"]+)">`)

// rowsOf are the entry ids a list page shows, in order.
func rowsOf(body string) []string {
	var out []string
	for _, m := range entryRow.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// The filters: status and category from their vocabularies in any case,
// a reason the policy names, tenant and agent in any case; anything else
// is a 400 that names the valid values, and finds nothing silently never.
func TestEntriesFilters(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	perm := func(en *store.Entry) { en.Category, en.ReasonCode = "permanent", "impossible_task" }
	e.seed(t, "T05", "TASKS.1", store.Escalated, `{}`, perm, func(en *store.Entry) { en.Agent = "Editor" })
	e.seed(t, "T05", "TASKS.2", store.Scheduled, `{}`)
	e.seed(t, "acme", "TASKS.3", store.Escalated, `{}`, perm)
	b := newBrowser(t, e.srv.URL)
	tests := []struct {
		query    string
		code     int
		want     []string // rows, newest first
		contains string   // in the 400's message
	}{
		{"tenant=t05", 200, []string{"TASKS.2", "TASKS.1"}, ""},
		{"tenant=T05&category=PERMANENT", 200, []string{"TASKS.1"}, ""},
		{"agent=EDITOR", 200, []string{"TASKS.1"}, ""},
		{"status=Escalated&tenant=acme", 200, []string{"TASKS.3"}, ""},
		{"reason=impossible_task", 200, []string{"TASKS.3", "TASKS.1"}, ""},
		{"category=Permanant", 400, nil, "transient, conditionally_recoverable, permanent"},
		{"status=stuck", 400, nil, "awaiting_approval"},
		{"reason=impossible", 400, nil, "impossible_task"},
		{"from=yesterday", 400, nil, "YYYY-MM-DD"},
		{"page_token=x&before=y", 400, nil, ""},
		{"before=bm90IGEgdG9rZW4", 400, nil, "not a token"},
		{"refresh=sometimes", 400, nil, "refresh"},
	}
	for _, tt := range tests {
		code, body := b.get("/entries?" + tt.query)
		if code != tt.code {
			t.Errorf("GET /entries?%s = %d, want %d:\n%.300s", tt.query, code, tt.code, body)
			continue
		}
		if tt.code != 200 {
			if !strings.Contains(html.UnescapeString(body), tt.contains) {
				t.Errorf("GET /entries?%s = 400 %.400s, want it to name %q", tt.query, body, tt.contains)
			}
			continue
		}
		if got := rowsOf(body); strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("GET /entries?%s lists %q, want %q", tt.query, got, tt.want)
		}
	}
	// No bulk redrive is offered without a filter; one is with.
	if _, body := b.get("/entries"); strings.Contains(body, `id="bulk"`) {
		t.Errorf("GET /entries offers a bulk redrive of everything")
	}
	if _, body := b.get("/entries?tenant=acme"); !strings.Contains(body, `id="bulk"`) {
		t.Errorf("GET /entries?tenant=acme offers no bulk redrive")
	}
}

// The lookup finds an entry by the start of its id, as well as by the
// whole id, task id or root id; a start no id can have finds nothing.
func TestEntriesLookupByIDPrefix(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	for _, id := range []string{"TASKS.120", "TASKS.121", "TASKS.13", "OTHER.120"} {
		e.seed(t, "acme", id, store.Escalated, `{}`)
	}
	b := newBrowser(t, e.srv.URL)
	tests := []struct {
		q    string
		want string
	}{
		{"TASKS.12", "TASKS.120 TASKS.121"},
		{"TASKS.13", "TASKS.13"},
		{"OTHER", "OTHER.120"},
		{"task-TASKS.13", "TASKS.13"},
		{"TASKS/1", ""},
		{"NONE", ""},
	}
	for _, tt := range tests {
		code, body := b.get("/entries?q=" + url.QueryEscape(tt.q))
		if got := strings.Join(rowsOf(body), " "); code != 200 || got != tt.want {
			t.Errorf("look up %q = %d %q, want 200 %q", tt.q, code, got, tt.want)
		}
	}
}

var (
	prevLink  = regexp.MustCompile(`<a class="prev" href="([^"]+)"`)
	firstLink = regexp.MustCompile(`<a class="first" href="([^"]+)"`)
)

// Next, then previous, comes back to the first page exactly; the first
// page has no previous link, and "first" leads there from any page.
func TestEntriesPreviousPage(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	n := 2*console.DefaultPageSize + 3
	for i := range n {
		e.seed(t, "acme", "TASKS."+strconv.Itoa(1000+i), store.Escalated, `{}`)
	}
	b := newBrowser(t, e.srv.URL)
	_, first := b.get("/entries?tenant=acme")
	if prevLink.MatchString(first) || firstLink.MatchString(first) {
		t.Errorf("the first page links to a previous or first page")
	}
	page1 := rowsOf(first)
	follow := func(re *regexp.Regexp, body string) string {
		t.Helper()
		m := re.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no %s link on the page", re)
		}
		code, next := b.get(html.UnescapeString(m[1]))
		if code != 200 {
			t.Fatalf("GET %s = %d", m[1], code)
		}
		return next
	}
	second := follow(nextLink, first)
	third := follow(nextLink, second)
	if got := len(rowsOf(third)); got != 3 {
		t.Errorf("third page lists %d, want 3", got)
	}
	back := follow(prevLink, third)
	if got, want := strings.Join(rowsOf(back), " "), strings.Join(rowsOf(second), " "); got != want {
		t.Errorf("previous of the third page = %q, want the second page %q", got, want)
	}
	backAgain := follow(prevLink, back)
	if got, want := strings.Join(rowsOf(backAgain), " "), strings.Join(page1, " "); got != want {
		t.Errorf("previous of the second page = %q, want the first %q", got, want)
	}
	if prevLink.MatchString(backAgain) {
		t.Errorf("the first page, reached backwards, still links to a previous page")
	}
	if got := strings.Join(rowsOf(follow(firstLink, third)), " "); got != strings.Join(page1, " ") {
		t.Errorf("first page link from the third = %q, want %q", got, page1)
	}
}

// Selected rows: a discard needs its confirmation and a reason, and acts
// only where a discard applies; a replay takes the bulk step of each
// (approve an escalated entry, leave a held one to its breaker); bad ids,
// too many and an unknown action are refused before anything changes.
// Posting the same selection twice is harmless: the second finds the
// entries moved on and says so (every action checks the status it was
// decided for).
func TestSelectedEntries(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	e.seed(t, "acme", "TASKS.1", store.Escalated, `{}`)
	e.seed(t, "acme", "TASKS.2", store.Escalated, `{}`)
	e.seed(t, "acme", "TASKS.3", store.Recovered, `{}`)
	e.seed(t, "acme", "TASKS.4", store.Held, `{}`)
	b := newBrowser(t, e.srv.URL)
	b.get("/entries")
	before := e.snapshot(t)
	var many []string
	for i := range console.DefaultPageSize + 1 {
		many = append(many, "TASKS."+strconv.Itoa(100+i))
	}
	for name, form := range map[string]url.Values{
		"unconfirmed discard": {"id": {"TASKS.1"}, "action": {"discard"}, "reason": {"dup"}},
		"discard, no reason":  {"id": {"TASKS.1"}, "action": {"discard"}, "confirm": {"yes"}},
		"no ids":              {"action": {"replay"}},
		"a forged id":         {"id": {"../tenants/acme"}, "action": {"replay"}},
		"too many":            {"id": many, "action": {"replay"}},
		"unknown action":      {"id": {"TASKS.1"}, "action": {"approve-all"}},
	} {
		form.Set("csrf", b.csrf)
		if code, _, body := b.post("/selected-entries", form); code != http.StatusBadRequest {
			t.Errorf("POST /selected-entries (%s) = %d, want 400:\n%.300s", name, code, body)
		}
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("refused selections changed something (-before +after):\n%s", diff)
	}

	discard := url.Values{"csrf": {b.csrf}, "id": {"TASKS.2", "TASKS.3"}, "action": {"discard"}, "reason": {"duplicates"}, "confirm": {"yes"}}
	code, _, body := b.post("/selected-entries", discard)
	if code != 200 || !strings.Contains(body, "1 of 2 selected entries discarded") || !strings.Contains(body, "a recovered entry cannot be discarded") {
		t.Errorf("discard selected = %d, want 1 of 2 discarded, the recovered one refused:\n%.600s", code, body)
	}
	replay := url.Values{"csrf": {b.csrf}, "id": {"TASKS.1", "TASKS.4", "TASKS.1"}, "action": {"replay"}}
	code, _, body = b.post("/selected-entries", replay)
	if code != 200 || !strings.Contains(body, "1 of 2 selected entries replayed") || !strings.Contains(body, "held by its tenant") {
		t.Errorf("replay selected = %d, want 1 of 2 (the held one left to its breaker):\n%.600s", code, body)
	}
	e.waitPublished(t, 1)
	code, _, body = b.post("/selected-entries", replay)
	if code != 200 || !strings.Contains(body, "0 of 2 selected entries replayed") {
		t.Errorf("the same replay again = %d, want nothing done twice:\n%.600s", code, body)
	}
	for id, want := range map[string]store.Status{"TASKS.2": store.Discarded, "TASKS.3": store.Recovered, "TASKS.4": store.Held} {
		got, err := e.st.GetMeta(ctx, id)
		if err != nil || got.Status != want {
			t.Errorf("%s after the selections = %v %v, want %s", id, got, err, want)
		}
	}
	if got := e.published(t); got != 1 {
		t.Errorf("%d replays published, want 1 (TASKS.1 once)", got)
	}
}

// Auto-refresh: off by default; ?refresh=on makes a live page reload
// itself, and its toggle and links keep or drop it. Pages that are not
// live take no such parameter.
func TestAutoRefresh(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	for i := range console.DefaultPageSize + 1 {
		e.seed(t, "acme", "TASKS."+strconv.Itoa(i+1), store.Escalated, `{}`)
	}
	b := newBrowser(t, e.srv.URL)
	const meta = `<meta http-equiv="refresh" content="30">`
	toggle := regexp.MustCompile(`id="refresh-toggle" href="([^"]+)"`)
	tests := []struct {
		path       string
		refreshing bool
		toggleTo   string
	}{
		{"/", false, "/?refresh=on"},
		{"/?refresh=on", true, "/"},
		{"/entries?tenant=acme", false, "/entries?refresh=on&tenant=acme"},
		{"/entries?tenant=acme&refresh=on", true, "/entries?tenant=acme"},
		{"/tenants?refresh=on", true, "/tenants"},
		{"/bulk/runs?refresh=off", false, "/bulk/runs?refresh=on"},
	}
	for _, tt := range tests {
		code, body := b.get(tt.path)
		if code != 200 || strings.Contains(body, meta) != tt.refreshing {
			t.Errorf("GET %s = %d, reloads itself %v, want 200 and %v", tt.path, code, strings.Contains(body, meta), tt.refreshing)
		}
		if m := toggle.FindStringSubmatch(body); m == nil || html.UnescapeString(m[1]) != tt.toggleTo {
			t.Errorf("GET %s toggle = %v, want %q", tt.path, m, tt.toggleTo)
		}
	}
	_, body := b.get("/entries?tenant=acme&refresh=on")
	if m := nextLink.FindStringSubmatch(body); m == nil || !strings.Contains(html.UnescapeString(m[1]), "refresh=on") {
		t.Errorf("the next page link of a refreshing list = %v, want it to keep refresh=on", m)
	}
	for _, path := range []string{"/audits?refresh=on", "/policy?refresh=on", "/entries?refresh=maybe"} {
		if code, _ := b.get(path); code != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", path, code)
		}
	}
}
