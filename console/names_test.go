package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// openBreaker opens tenant's breaker as Threshold failures in its window
// would (written directly: the test is about the page, not the trip).
func (e *env) openBreaker(t *testing.T, tenant string) {
	t.Helper()
	id, err := store.EntryID(tenant)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if _, err := e.fs.Collection(store.Breakers).Doc(id).Set(testenv.Context(t),
		store.Breaker{Tenant: tenant, State: store.BreakerOpen, OpenedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
}

// hostileTenants are the corpus' names the rule accepts, and the reserved
// tenant an operator acts on: the tenants a breaker can have.
func hostileTenants() []string {
	out := []string{jevent.ReservedTenant}
	for _, h := range testenv.HostileNames() {
		if h.Valid {
			out = append(out, h.Value)
		}
	}
	return out
}

// A tenant is a name, never structure: on the tenants page every breaker's
// link and forms resolve (as a browser resolves them) to that tenant's own
// resource, and closing each breaker through its own form closes that
// breaker and nothing else. The path-shaped tenant "../entries/TASKS.1/
// discard?" names an entry that exists; it is not discarded.
func TestTenantNamesStayOnTheirOwnBreaker(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	victim := e.seed(t, "victim", "TASKS.1", store.Escalated, `{"v":1}`)
	tenants := hostileTenants()
	for _, tenant := range tenants {
		e.openBreaker(t, tenant)
	}
	e.openBreaker(t, "bystander")
	b := newBrowser(t, e.srv.URL)
	code, page := b.get("/tenants")
	if code != http.StatusOK {
		t.Fatalf("GET /tenants = %d", code)
	}
	forms := map[string]url.Values{} // tenant → its close form's action path
	for _, l := range testenv.Links(t, e.srv.URL+"/tenants", page) {
		seg := testenv.Segments(t, l.To)
		switch {
		case l.Kind == "a" && l.To.Path == "/entries":
			if got := l.To.Query().Get("tenant"); got != l.Row {
				t.Errorf("row %q links to the entries of tenant %q", l.Row, got)
			}
		case l.Kind == "form" && l.Method == "post":
			if len(seg) != 3 || seg[0] != "tenants" || seg[1] != l.Row || (seg[2] != "close" && seg[2] != "probe") || l.To.RawQuery != "" {
				t.Errorf("row %q has a form posting to %s (segments %q), want /tenants/<that tenant>/close or probe", l.Row, l.To, seg)
				continue
			}
			if seg[2] == "close" {
				forms[l.Row] = url.Values{"action": {l.To.RequestURI()}}
			}
		}
	}
	for _, tenant := range append(tenants, "bystander") {
		if forms[tenant] == nil {
			t.Errorf("no close form for tenant %q on the tenants page", tenant)
		}
	}
	for _, tenant := range tenants {
		f := forms[tenant]
		if f == nil {
			continue
		}
		code, loc, body := b.post(f.Get("action"), url.Values{"csrf": {b.csrf}, "reason": {"recovered"}})
		if code != http.StatusSeeOther || loc != "/tenants?done=breaker-closed" {
			t.Errorf("close %q through its form = %d %q, want 303 to /tenants:\n%s", tenant, code, loc, body)
		}
		b.get("/tenants") // a fresh token, as a browser reloading the page
	}
	for _, tenant := range tenants {
		if br, err := e.st.GetBreaker(ctx, tenant); err != nil || br.State != store.BreakerClosed {
			t.Errorf("breaker of %q = %+v, %v, want closed by its own form", tenant, br, err)
		}
	}
	if br, err := e.st.GetBreaker(ctx, "bystander"); err != nil || br.State != store.BreakerOpen {
		t.Errorf("breaker of bystander = %+v, %v, want still open", br, err)
	}
	if got, err := e.st.GetMeta(ctx, victim.ID); err != nil || got.Status != store.Escalated || len(got.History) != 1 {
		t.Errorf("entry %s = %+v, %v, want escalated and untouched", victim.ID, got, err)
	}
}

// Entry ids whose stream needs encoding (WORK~EU is WORK%7EEU.5 as a
// document id) link to their own page from the list, and every form and
// link on that page stays on the entry.
func TestEntryIDsThatNeedEncodingLinkToTheirPage(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	want := map[string]bool{}
	for _, stream := range testenv.HostileStreams() {
		id, err := store.EntryID(jevent.ID(stream, 5))
		if err != nil {
			t.Fatal(err)
		}
		e.seed(t, "acme", id, store.Escalated, `{"s":1}`, func(en *store.Entry) { en.EventID, en.Stream = jevent.ID(stream, 5), stream })
		want[id] = true
	}
	b := newBrowser(t, e.srv.URL)
	code, page := b.get("/entries?tenant=acme")
	if code != http.StatusOK {
		t.Fatalf("GET /entries = %d", code)
	}
	seen := map[string]bool{}
	for _, l := range testenv.Links(t, e.srv.URL+"/entries", page) {
		seg := testenv.Segments(t, l.To)
		if len(seg) != 2 || seg[0] != "entries" {
			continue
		}
		id := seg[1]
		if !want[id] || l.Row != id {
			t.Errorf("row %q links to entry %q", l.Row, id)
			continue
		}
		seen[id] = true
		code, entryPage := b.get(l.To.RequestURI())
		if code != http.StatusOK || !strings.Contains(entryPage, "<title>Entry "+html.EscapeString(id)) {
			t.Errorf("GET %s = %d, want the page of entry %s", l.To.RequestURI(), code, id)
			continue
		}
		for _, el := range testenv.Links(t, e.srv.URL+l.To.RequestURI(), entryPage) {
			es := testenv.Segments(t, el.To)
			if len(es) >= 2 && es[0] == "entries" && es[1] != id && !want[es[1]] {
				t.Errorf("the page of %s links to another entry: %s", id, el.To)
			}
			if el.Kind == "form" && (len(es) != 3 || es[0] != "entries" || es[1] != id) {
				t.Errorf("the page of %s has a form posting to %s", id, el.To)
			}
		}
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("the entries list has no link to %s", id)
		}
	}
}

// Malformed input is a 400 before any I/O: the console here reads a
// Firestore that accepts connections and never answers, so any request
// that reached it would hang; every one of these is answered at once. An
// invalid-UTF-8 filter used to be retried inside the Firestore client until
// the caller gave up.
func TestMalformedInputIs400BeforeFirestore(t *testing.T) {
	st := store.New(testenv.BlackHoleFirestore(t))
	c := console.New(st, operator.New(st, nil), console.LocalAuth("ops@example.com"))
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	b := newBrowser(t, srv.URL)
	b.c.Timeout = 30 * time.Second // an upper bound: a request that reached Firestore never ends
	for _, path := range []string{
		"/entries?tenant=%FF", "/entries?tenant=acme%E2%80%AE", "/entries?agent=a%1B%5B2J", "/entries?task_type=" + strings.Repeat("t", 600),
		"/entries?category=%FF", "/entries?reason=x%0Ay", "/entries?q=%FF", "/entries?tenant=..", "/entries?tenant=%28others%29",
		"/entries/%FF", "/entries/a%2Fb", "/audits?page_token=%FF", "/policy?entry=%FF", "/bulk?tenant=%FF",
		"/bulk/%FF", "/audits/%FF",
	} {
		if code, body := b.get(path); code != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400 before any I/O:\n%.300s", path, code, body)
		}
	}
	tok := csrfCookieToken(t, b)
	for path, form := range map[string]url.Values{
		"/tenants/%FF/close":           {"reason": {"x"}},
		"/tenants/acme/close":          {"reason": {"line\nforged"}},
		"/tenants/acme%E2%80%AE/probe": {"reason": {"x"}, "entry": {"TASKS.1"}},
		"/tenants/acme/probe":          {"reason": {"x"}, "entry": {"a/b"}},
		"/entries/TASKS.1/discard":     {"reason": {"ok\u202eko"}},
		"/entries/%FF/discard":         {"reason": {"x"}},
		// The approve form's own fields (not typed by the operator).
		"/entries/TASKS.1/approve": {"base": {"abc"}, "step": {"preview"}},
		"/entries/TASKS.2/approve": {"since": {"yesterday"}, "step": {"preview"}},
		"/entries/TASKS.3/approve": {"confirm": {"everything"}, "payload": {""}, "step": {"confirm"}},
	} {
		form.Set("csrf", tok)
		if code, _, body := b.post(path, form); code != http.StatusBadRequest {
			t.Errorf("POST %s %v = %d, want 400 before any I/O:\n%.300s", path, form, code, body)
		}
	}
	for _, path := range []string{
		"/api/v1/tenants/acme/entries?agent=%FF", "/api/v1/tenants/acme/entries?reason=a%00", "/api/v1/tenants/%FF/entries",
		"/api/v1/tenants/%28invalid%29/entries", "/api/v1/tenants/acme/entries/%FF", "/api/v1/tenants/acme%E2%80%AE/webhooks",
	} {
		code, body := do(t, http.MethodGet, srv.URL+path, "jsdlq_0123456789abcdef_secret", "")
		if code != http.StatusBadRequest || !strings.Contains(body, "invalid_argument") {
			t.Errorf("GET %s = %d %s, want 400 invalid_argument before the key is read", path, code, body)
		}
	}
}

// csrfCookieToken is the CSRF token a browser's forms carry: the double
// submit of the cookie the console set with the pages above (the pages of
// this console are error pages, which carry no form).
func csrfCookieToken(t *testing.T, b *browser) string {
	t.Helper()
	u, _ := url.Parse(b.base)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "jsdlq_csrf" {
			return c.Value
		}
	}
	t.Fatal("the console set no CSRF cookie")
	return ""
}

// A handler past the console's deadline is cut off with a 503 (the
// console's server is obs.Listen's, with CONSOLE_REQUEST_TIMEOUT): here the
// overview waits on a Firestore that never answers.
func TestConsoleRequestPastItsDeadline(t *testing.T) {
	st := store.New(testenv.BlackHoleFirestore(t))
	c := console.New(st, operator.New(st, nil), console.LocalAuth("ops@example.com"))
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = obs.NewServer(c.Handler(), obs.Limits{Request: 500 * time.Millisecond})
	srv.Start()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET / with a Firestore that never answers: %v, want a 503 at the deadline", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET / = %d, want 503 at the request deadline", resp.StatusCode)
	}
}

// What the console logs of a request it refuses (a Host not its own, a
// form of a role that acts on nothing) holds its path through the log
// encoder: a path of control or bidirectional characters, which anyone can
// send, reaches no log line raw.
func TestConsoleRefusalsLogPathsEscaped(t *testing.T) {
	st := store.New(testenv.BlackHoleFirestore(t))
	log, logs := testenv.Logger()
	viewer := console.LocalActor{Name: "viewer@example.com", Role: authority.Viewer}
	c := console.New(st, operator.New(st, nil), viewer, console.WithLogger(log), console.WithHosts("http://console.test"))
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	send := func(method, host, path string, want int) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s %s (Host %s) = %d, want %d", method, path, host, resp.StatusCode, want)
		}
	}
	for _, n := range testenv.HostileNames() {
		p, err := jevent.URLPath("entries", n.Value)
		if err != nil {
			continue // no path carries it as one segment
		}
		send(http.MethodGet, "evil.test", p, http.StatusMisdirectedRequest)
		send(http.MethodPost, "console.test", p+"/discard", http.StatusForbidden)
	}
	if len(logs.Lines("host_refused")) == 0 || len(logs.Lines("form refused")) == 0 {
		t.Fatalf("the refusals were not logged:\n%s", logs)
	}
	logs.CheckVisibleLines(t, "console refusals")
}

// The values of a dead task the entry page shows (its stream, subject,
// consumer, task id, idempotency key, failure code and agent, its
// history's actors and notes, the headers a version sets) are shown as
// they are, but for their control, format and bidirectional characters,
// which are shown escaped (the template func visible): a stream named
// "WORK\u202eUE" cannot turn the rest of its line around. Only the
// payload and the agent's free-text detail are shown as sent.
func TestEntryPageShowsWireValuesVisibly(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	const rlo, esc = "\u202e", "\x1b[2J"
	stream := "WORK" + rlo + "UE"
	id, err := store.EntryID(jevent.ID(stream, 5))
	if err != nil {
		t.Fatal(err)
	}
	e.seed(t, "acme", id, store.Escalated, `{"s":1}`, func(en *store.Entry) {
		en.EventID, en.Stream, en.Consumer = jevent.ID(stream, 5), stream, "worker"+rlo+"x"
		en.Subject, en.TaskID, en.IdempotencyKey = "agents.writer"+rlo+".tasks.x", "task"+esc, "key"+rlo+"gnp.exe"
		en.Failure = &jevent.Failure{Code: "timeout" + rlo, Agent: "writer" + esc, Detail: "free text", CompletedSteps: []string{"step" + rlo}}
	})
	by := authority.Actor{Name: "dlqctl:ops" + rlo, Role: authority.Approver}
	if _, err := e.st.TransitionScoped(ctx, id, store.AllTenants, store.Change{From: []store.Status{store.Escalated}, To: store.Scheduled,
		By: by.Name, Role: by.Role, Note: store.ApprovalNote + " by " + by.String()},
		&store.Edit{Headers: map[string]string{"X-Edit" + rlo: "v" + esc}, By: by.Name, Role: by.Role}); err != nil {
		t.Fatal(err)
	}
	path, err := jevent.URLPath("entries", id)
	if err != nil {
		t.Fatal(err)
	}
	code, page := newBrowser(t, e.srv.URL).get(path)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d:\n%s", path, code, page)
	}
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && (n.Data == "pre" || n.Data == "textarea") {
			return // the payload and the agent's detail, as sent
		}
		if n.Type == html.TextNode {
			testenv.CheckVisible(t, "the text of the entry page", n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	for _, want := range []string{`WORK\u202eUE`, `task\x1b[2J`, `key\u202egnp.exe`, `X-Edit\u202e`} {
		if !strings.Contains(page, want) {
			t.Errorf("the entry page does not show %s escaped", want)
		}
	}
}
