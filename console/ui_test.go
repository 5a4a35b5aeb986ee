package console_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// browser is an operator's browser: it keeps cookies and reads the CSRF
// token from the forms it is shown.
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
	csrf string
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	code, _, body := b.read(resp, err)
	return code, body
}

// wantCodes gets each path and checks the status it is answered with.
func (b *browser) wantCodes(want map[string]int) {
	b.t.Helper()
	for path, code := range want {
		if got, _ := b.get(path); got != code {
			b.t.Errorf("GET %s = %d, want %d", path, got, code)
		}
	}
}

func (b *browser) post(path string, form url.Values) (int, string, string) {
	b.t.Helper()
	return b.read(b.c.PostForm(b.base+path, form))
}

// read takes a response as a browser does, keeping the CSRF token of the
// page it shows for the next form.
func (b *browser) read(resp *http.Response, err error) (code int, location, body string) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if m := csrfInput.FindStringSubmatch(string(raw)); m != nil {
		b.csrf = m[1]
	}
	return resp.StatusCode, resp.Header.Get("Location"), string(raw)
}

func TestConsolePagesAndActions(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	evil := `{"note":"</pre><script>alert(1)</script><img src=x onerror=alert(2)>"}`
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, evil)
	e.seed(t, "acme", "TASKS.2", store.Scheduled, `{"a":2}`)
	e.seed(t, "globex", "TASKS.3", store.Quarantined, `{"g":3}`)
	b := newBrowser(t, e.srv.URL)

	code, body := b.get("/")
	if code != 200 || !strings.Contains(body, "<svg") || !strings.Contains(body, "TASKS.1") || !strings.Contains(body, "TASKS.3") {
		t.Fatalf("overview = %d, want the chart and the waiting entries:\n%s", code, body)
	}
	code, body = b.get("/entries?tenant=globex")
	if code != 200 || !strings.Contains(body, "TASKS.3") || strings.Contains(body, "TASKS.1") {
		t.Errorf("entries?tenant=globex = %d, want TASKS.3 only", code)
	}
	code, body = b.get("/entries?status=scheduled")
	if code != 200 || !strings.Contains(body, "TASKS.2") || strings.Contains(body, ">TASKS.1<") {
		t.Errorf("entries?status=scheduled = %d, want TASKS.2 only", code)
	}
	code, body = b.get("/entries?q=task-TASKS.3")
	if code != 200 || !strings.Contains(body, "TASKS.3") || strings.Contains(body, ">TASKS.2<") {
		t.Errorf("lookup by task id = %d, want TASKS.3", code)
	}
	for _, bad := range []string{"/entries?colour=red", "/entries?status=nope", "/entries?page_token=garbage!", "/entries?from=yesterday", "/entries?tenant=%%"} {
		if code, _ := b.get(bad); code != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", bad, code)
		}
	}

	// No payload byte is rendered unescaped.
	code, body = b.get("/entries/TASKS.1")
	if code != 200 || strings.Contains(body, "<script>") || strings.Contains(body, "<img src=x") || !strings.Contains(body, "&lt;script&gt;") {
		t.Fatalf("entry page = %d, payload not escaped:\n%s", code, body)
	}
	if !strings.Contains(body, "sha256") || !strings.Contains(body, "awaiting_approval") {
		t.Errorf("entry page lacks sha256 or status")
	}

	// A state-changing form without its token is refused, and changes nothing.
	before := e.snapshot(t)
	for name, form := range map[string]url.Values{
		"no token":    {"reason": {"x"}},
		"wrong token": {"reason": {"x"}, "csrf": {strings.Repeat("A", 43)}},
	} {
		if code, _, _ := b.post("/entries/TASKS.2/discard", form); code != http.StatusForbidden {
			t.Errorf("discard with %s = %d, want 403", name, code)
		}
	}
	cross, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/entries/TASKS.2/discard", strings.NewReader(url.Values{"reason": {"x"}, "csrf": {b.csrf}}.Encode()))
	cross.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	cross.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := b.c.Do(cross); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site discard = %v %v, want 403", resp.StatusCode, err)
	}
	if code, _, _ := b.post("/entries/TASKS.2/discard", url.Values{"csrf": {b.csrf}}); code != http.StatusBadRequest {
		t.Errorf("discard without reason = %d, want 400", code)
	}
	if diff := diffSnap(before, e.snapshot(t)); diff != "" {
		t.Errorf("refused forms changed state: %s", diff)
	}

	// Approve with an edited payload: a preview with the diff, then the replay.
	edited := `{"note":"fixed"}`
	code, _, body = b.post("/entries/TASKS.1/approve", url.Values{"csrf": {b.csrf}, "payload": {edited}, "headers": {"X-Fix: 1"}, "step": {"preview"}})
	if code != 200 || !strings.Contains(body, `class="dadd"`) || !strings.Contains(body, "fixed") || !strings.Contains(body, "X-Fix: 1") || strings.Contains(body, "<script>") {
		t.Fatalf("approve preview = %d, want a diff:\n%s", code, body)
	}
	n := e.published(t)
	code, loc, body := b.post("/entries/TASKS.1/approve", url.Values{"csrf": {b.csrf}, "payload": {edited}, "headers": {"X-Fix: 1"}, "step": {"confirm"}})
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/entries/TASKS.1") {
		t.Fatalf("approve confirm = %d %s %s", code, loc, body)
	}
	e.waitPublished(t, n+1)
	en, err := e.st.Get(ctx, "TASKS.1")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := en.ReplayVersion()
	approved, err := e.st.VersionPayload(ctx, en, v.N)
	if err != nil || string(approved) != edited || string(en.Payload) != evil || !strings.Contains(historyBy(en), "ops@example.com") {
		t.Errorf("approved version %d %q (%v), original %q, history %s; want the edit as version 2 beside the original, by ops@example.com",
			v.N, approved, err, en.Payload, historyBy(en))
	}

	// Discard with a reason; tenants page renders.
	if code, _, body := b.post("/entries/TASKS.2/discard", url.Values{"csrf": {b.csrf}, "reason": {"duplicate"}}); code != http.StatusSeeOther {
		t.Errorf("discard = %d %s", code, body)
	}
	if code, body := b.get("/tenants"); code != 200 || !strings.Contains(body, "acme") {
		t.Errorf("tenants = %d", code)
	}
	if code, _, _ := b.post("/tenants/acme/close", url.Values{"csrf": {b.csrf}}); code != http.StatusBadRequest {
		t.Errorf("close breaker without reason = %d, want 400", code)
	}
	// A breaker action with nothing to override (a second operator, a
	// double click; the entry page offers a probe whatever the breaker's
	// state) says why with a 409, not an internal error.
	b.post("/tenants/globex/close", url.Values{"csrf": {b.csrf}, "reason": {"fixed"}})
	if code, _, body := b.post("/tenants/globex/close", url.Values{"csrf": {b.csrf}, "reason": {"fixed"}}); code != http.StatusConflict || !strings.Contains(body, "closed") {
		t.Errorf("close of a closed breaker = %d, want 409 saying it is closed:\n%s", code, body)
	}
	e.seed(t, "globex", "TASKS.4", store.Scheduled, `{"g":4}`)
	if code, _, body := b.post("/entries/TASKS.4/probe", url.Values{"csrf": {b.csrf}, "reason": {"try"}}); code != http.StatusConflict || !strings.Contains(body, "breaker override refused") {
		t.Errorf("probe through a closed breaker = %d, want 409 saying why:\n%s", code, body)
	}
}

func historyBy(e *store.Entry) string {
	var by []string
	for _, h := range e.History {
		by = append(by, h.By)
	}
	return strings.Join(by, ",")
}

func diffSnap(a, b snapshot) string {
	if a.Tasks != b.Tasks || a.Stream != b.Stream || len(a.Entries) != len(b.Entries) {
		return "counts differ"
	}
	for k, v := range a.Entries {
		if b.Entries[k] != v {
			return k + ": " + v + " -> " + b.Entries[k]
		}
	}
	return ""
}

// IAP's signed header is verified in code: a request without it, with a
// token of another key, audience or issuer, or an expired one is 401.
func TestIAPAuth(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	const aud = "/projects/1/locations/r/services/console"
	now := time.Now()
	auth := console.NewIAPAuth(aud, keys{"k1": &key.PublicKey}, func() time.Time { return now })
	good := jwt.MapClaims{"iss": console.IAPIssuer, "aud": aud, "sub": "accounts.google.com:1", "email": "accounts.google.com:ops@example.com",
		"iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for a, b := range good {
			c[a] = b
		}
		c[k] = v
		return c
	}
	req := func(h string) *http.Request {
		r, _ := http.NewRequestWithContext(context.Background(), "GET", "/", nil)
		if h != "" {
			r.Header.Set(console.IAPHeader, h)
		}
		return r
	}
	if who, err := auth.Identity(req(testenv.SignJWT(t, key, "k1", good))); err != nil || who != (console.Identity{Email: "ops@example.com"}) {
		t.Errorf("Identity(good) = %+v, %v, want ops@example.com", who, err)
	}
	if who, err := auth.Identity(req(testenv.SignJWT(t, key, "k1", with("hd", "example.com")))); err != nil || who != (console.Identity{Email: "ops@example.com", Domain: "example.com"}) {
		t.Errorf("Identity(with hd) = %+v, %v, want ops@example.com of example.com", who, err)
	}
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, good)
	hsTok, _ := hs.SignedString([]byte("secret"))
	for name, h := range map[string]string{
		"none":         "",
		"garbage":      "a.b.c",
		"other key":    testenv.SignJWT(t, other, "k1", good),
		"unknown kid":  testenv.SignJWT(t, key, "k2", good),
		"other aud":    testenv.SignJWT(t, key, "k1", with("aud", "/projects/1/locations/r/services/other")),
		"other issuer": testenv.SignJWT(t, key, "k1", with("iss", "https://accounts.google.com")),
		"expired":      testenv.SignJWT(t, key, "k1", with("exp", now.Add(-time.Hour).Unix())),
		"no email":     testenv.SignJWT(t, key, "k1", with("email", "")),
		"HS256":        hsTok,
		"no expiry":    testenv.SignJWT(t, key, "k1", with("exp", nil)),
	} {
		if _, err := auth.Identity(req(h)); !errors.Is(err, console.ErrUnauthenticated) {
			t.Errorf("Identity(%s) = %v, want ErrUnauthenticated", name, err)
		}
	}
}

type keys map[string]*ecdsa.PublicKey

func (k keys) Key(_ context.Context, kid string) (*ecdsa.PublicKey, error) {
	if pk, ok := k[kid]; ok {
		return pk, nil
	}
	return nil, console.ErrUnauthenticated
}

// The next-page link works as a browser follows it: its query keeps the
// filters and the page token (html/template must not escape its = and &).
func TestEntriesNextPageLink(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	for i := range console.DefaultPageSize + 1 {
		e.seed(t, "acme", "TASKS."+strconv.Itoa(i+1), store.Escalated, `{}`)
	}
	b := newBrowser(t, e.srv.URL)
	code, body := b.get("/entries?tenant=acme")
	m := nextLink.FindStringSubmatch(body)
	if code != 200 || m == nil {
		t.Fatalf("GET /entries?tenant=acme = %d, want a next link", code)
	}
	next := html.UnescapeString(m[1])
	code, body = b.get(next)
	if code != 200 {
		t.Fatalf("GET %s (the next link) = %d, want 200:\n%s", next, code, body)
	}
	if rows := strings.Count(body, `<tr><td><a href="/entries/`); rows != 1 {
		t.Errorf("GET %s lists %d entries, want the 1 left after a page of %d", next, rows, console.DefaultPageSize)
	}
}

// The overview's rates and charts over a seeded history with known
// answers. The console's clock is pinned two and a half hours after the
// real one, so the entries recorded now (real time) fall inside both
// windows and every other hour is placed by hand.
func TestOverviewRatesAndCharts(t *testing.T) {
	real := time.Now().UTC()
	now := real.Truncate(time.Hour).Add(2*time.Hour + 30*time.Minute)
	e := newEnv(t, console.LocalAuth("ops@example.com"), console.WithClock(func() time.Time { return now }))
	ctx := testenv.Context(t)
	hour := func(k int) time.Time {
		return now.Truncate(time.Hour).Add(time.Duration(-k)*time.Hour + 10*time.Minute)
	}
	// Entries recorded now land in hour 2 (6 dead, all transient): 3
	// recovered, 1 escalated, 1 discarded settled; 1 scheduled is not.
	for i, st := range []store.Status{store.Recovered, store.Recovered, store.Recovered, store.Escalated, store.Discarded, store.Scheduled} {
		e.seed(t, "acme", "TASKS."+strconv.Itoa(i+1), st, `{}`)
	}
	for _, m := range []struct {
		k   int
		cat string
		n   int64
	}{{0, "transient", 2}, {0, "poison", 1}, {5, "transient", 2}, {30, "permanent", 10}, {200, "permanent", 100}} {
		if err := e.st.AddMetrics(ctx, hour(m.k), "seed", store.Metrics{Total: m.n, ByCategory: map[string]int64{m.cat: m.n}}); err != nil {
			t.Fatal(err)
		}
	}
	// Samples of TASKS: hour 30 publishes 900-500 (no sample before it),
	// hour 24 1000-900, hour 23 1100-1000, hour 5 1500-1100 (the unsampled
	// hours between count here), hour 0 1600-1500.
	for _, sm := range []struct {
		k           int
		first, last int64
	}{{30, 500, 900}, {24, 1000, 1000}, {23, 1000, 1100}, {5, 1200, 1500}, {0, 1500, 1600}} {
		in := store.MetricsSample{Stream: "TASKS", FirstAt: hour(sm.k), LastAt: hour(sm.k), FirstLastSeq: sm.first, LastSeq: sm.last}
		if err := e.st.RecordSample(ctx, hour(sm.k), in); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, e.srv.URL)
	code, body := b.get("/")
	if code != 200 {
		t.Fatalf("GET / = %d:\n%s", code, body)
	}
	for _, want := range []struct{ what, re string }{
		// 24 h: hours 23, 5 and 0 sampled: (0+2+3) dead of 100+400+100.
		{"24 h DLQ rate", `id="dlq-rate-24">0.83 %<`},
		{"24 h counts", `<td>5 / 600</td><td>3 of 24</td>`},
		// 7 d: hours 30 and 24 too: (10+0+5) of 400+100+600.
		{"7 d DLQ rate", `id="dlq-rate-168">1.36 %<`},
		{"7 d counts", `<td>15 / 1100</td><td>5 of 168</td>`},
		// 3 recovered of 5 settled, in both windows.
		{"24 h recovery rate", `id="recovery-rate-24">60.00 %<`},
		{"7 d recovery rate", `id="recovery-rate-168">60.00 %<`},
		// Dead per window: 3+2+6 in the day, +10 in the week (hour 200 is older).
		{"24 h chart total", `last 24 h \(11\)`},
		{"7 d chart total", `last 7 days \(21\)`},
	} {
		if !regexp.MustCompile(want.re).MatchString(body) {
			t.Errorf("overview: %s: no match for %s", want.what, want.re)
		}
	}
	week := svg(t, body, "chart-week")
	day := svg(t, body, "chart-day")
	if n := strings.Count(week, `<text class="tick"`); n != 7 {
		t.Errorf("7-day chart has %d day labels, want 7", n)
	}
	if n := strings.Count(day, `<text class="tick"`); n != 4 {
		t.Errorf("24 h chart has %d labels, want 4 (every 6 hours)", n)
	}
	if old := store.Hour(hour(30)) + " permanent: 10"; !strings.Contains(week, old) || strings.Contains(day, old) {
		t.Errorf("the bar of hour -30 (%q) belongs to the 7-day chart only", old)
	}
	// A bar a day is 5 pixels wide here: 168 of them across 840.
	if !strings.Contains(week, `x="835"`) || strings.Contains(week, `x="840"`) {
		t.Errorf("7-day chart: the current hour's bar is not the 168th")
	}
}

// svg returns the inline chart with the id.
func svg(t *testing.T, body, id string) string {
	t.Helper()
	i := strings.Index(body, `<svg class="chart" id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no chart %s", id)
	}
	j := strings.Index(body[i:], "</svg>")
	return body[i : i+j]
}

// The audits list pages newest first; a report shows its alerts (errors
// first), repairs, sections and examples (a tenant's as its entries, others
// as a lookup; everything escaped); bad tokens and ids are 400, a missing
// report 404.
func TestAuditPages(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	at := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	for i := range 30 {
		r := &audit.Report{Schema: audit.Schema, RunID: fmt.Sprintf("20261120T%02d0000Z-run%02d", i%24, i), StartedAt: at.Add(time.Duration(i) * time.Hour),
			FinishedAt: at.Add(time.Duration(i)*time.Hour + 42*time.Second), Complete: true, Alerts: []string{}}
		if i == 29 {
			missing := audit.NewFinding(audit.AlertMissingTask, "tasks", "", "1 scheduled entry had no task <script>alert(1)</script>")
			missing.Example("TASKS.7")
			missing.Repair = &audit.Repair{Action: "recreate_task", RepairTotals: audit.RepairTotals{Planned: 1, Done: 1}}
			burst := audit.NewFinding(audit.AlertTenantPoisonBurst, "entries", "acme", "tenant acme has 5 poison entries in the last hour")
			burst.Example("acme")
			burst.Value, burst.Threshold = 5, 3
			done := audit.NewFinding(audit.FindingReplayedCompleted, "replayed", "", "2 replayed entries completed")
			done.Example("TASKS.8")
			r.Findings = []*audit.Finding{done, missing, burst}
			r.Alerts = []string{audit.AlertMissingTask, audit.AlertTenantPoisonBurst}
			r.Sections = []*audit.Section{{Name: "tasks", Status: audit.StatusComplete, Counts: map[string]int64{"scheduled": 3}}}
			r.Repairs = audit.RepairTotals{Planned: 1, Done: 1}
		}
		if err := e.st.SaveAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, e.srv.URL)
	code, body := b.get("/audits")
	rows := regexp.MustCompile(`<tr><td><a href="/audits/([^"]+)">`).FindAllStringSubmatch(body, -1)
	if code != 200 || len(rows) != 25 || rows[0][1] != "20261120T050000Z-run29" || rows[24][1] != "20261120T050000Z-run05" {
		t.Fatalf("GET /audits = %d with %d rows (first %v), want 25 newest first from run29", code, len(rows), rows[:min(1, len(rows))])
	}
	m := nextLink.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("GET /audits: no link to older reports")
	}
	code, body = b.get(html.UnescapeString(m[1]))
	rows = regexp.MustCompile(`<tr><td><a href="/audits/([^"]+)">`).FindAllStringSubmatch(body, -1)
	if code != 200 || len(rows) != 5 || rows[4][1] != "20261120T000000Z-run00" || nextLink.MatchString(body) {
		t.Errorf("older reports = %d with %d rows, want the 5 oldest and no further link", code, len(rows))
	}

	code, body = b.get("/audits/20261120T050000Z-run29")
	if code != 200 {
		t.Fatalf("GET report = %d:\n%s", code, body)
	}
	alerts := body[strings.Index(body, "<h2>Alerts (2)</h2>"):strings.Index(body, "<h2>Repairs without an alert (1)</h2>")]
	for _, want := range []string{audit.AlertMissingTask, audit.AlertTenantPoisonBurst, `<a href="/entries?q=TASKS.7">TASKS.7</a>`, "recreate_task: 1 of 1",
		"value 5, threshold 3", `<a href="/entries?tenant=acme">acme</a>`, "&lt;script&gt;"} {
		if !strings.Contains(alerts, want) {
			t.Errorf("report alerts lack %q", want)
		}
	}
	if strings.Index(alerts, audit.AlertTenantPoisonBurst) > strings.Index(alerts, audit.AlertMissingTask) {
		t.Errorf("report: the ERROR alert (%s) should come before the WARNING one", audit.AlertTenantPoisonBurst)
	}
	if strings.Contains(body, "<script>") || !strings.Contains(body, audit.FindingReplayedCompleted) || strings.Contains(alerts, audit.FindingReplayedCompleted) {
		t.Errorf("report: the INFO finding belongs under repairs, and nothing is rendered unescaped")
	}
	b.wantCodes(map[string]int{
		"/audits?page_token=nope":            http.StatusBadRequest,
		"/audits?page_token=_lease":          http.StatusBadRequest,
		"/audits?colour=red":                 http.StatusBadRequest,
		"/audits?page_token=a&page_token=b":  http.StatusBadRequest,
		"/audits/20261120T050000Z-run29?x=1": http.StatusBadRequest,
		"/audits/_state":                     http.StatusBadRequest,
		"/audits/nope":                       http.StatusNotFound,
	})
}

// cell is the text of the element with the id (html-unescaped).
func cell(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no element %s", id)
	}
	return html.UnescapeString(m[1])
}

// The policy page shows the version in force and its diff from the
// default, and tests an entry exactly as the store decides it
// (PolicyInput, PolicyChain, Evaluate, Decide), changing nothing; an
// override changes the answer, an invalid one is shown as not in force.
func TestPolicyPage(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{}`)
	e.seed(t, "acme", "TASKS.2", store.Escalated, `{}`, func(en *store.Entry) {
		en.Failure = &jevent.Failure{Code: "context_window_overflow", Attempt: 1, Agent: "writer"}
		// The second overflow of a chain: the policy judges the chain.
		en.ChainCodes, en.ChainStrategies = []string{"context_window_overflow"}, []string{"context_overflow"}
	})
	b := newBrowser(t, e.srv.URL)
	def := triage.Default()

	// want is the store's own decision for the entry under p.
	want := func(p *triage.Policy, id string) *store.Entry {
		t.Helper()
		en, err := e.st.GetMeta(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		in, err := en.PolicyInput()
		if err != nil {
			t.Fatal(err)
		}
		w := *en
		w.Decide(p.Evaluate(in, en.PolicyChain()), time.Now())
		return &w
	}
	check := func(p *triage.Policy, id string) {
		t.Helper()
		code, body := b.get("/policy?entry=" + id)
		if code != 200 {
			t.Fatalf("GET /policy?entry=%s = %d:\n%s", id, code, body)
		}
		w := want(p, id)
		for cellID, v := range map[string]string{
			"policy-version": p.Version(), "test-reason": w.ReasonCode, "test-category": w.Category, "test-rule": w.Rule,
			"test-action": w.Action, "test-strategy": w.Strategy, "test-status": string(w.Status),
			"test-retention": triage.FormatRetention(w.Plan.Retention()) + " from creation",
		} {
			if got := cell(t, body, cellID); got != v {
				t.Errorf("policy test of %s under %s: %s = %q, want the store's %q", id, p.Version(), cellID, got, v)
			}
		}
		delay := cell(t, body, "test-delay")
		if (w.Status == store.Scheduled) != strings.Contains(delay, "jitter") {
			t.Errorf("policy test of %s: delay %q for status %s", id, delay, w.Status)
		}
	}
	before := e.snapshot(t)
	code, body := b.get("/policy")
	if code != 200 || cell(t, body, "policy-version") != def.Version() || !strings.Contains(body, `id="policy-same"`) {
		t.Fatalf("GET /policy = %d, want the default %s in force and no diff", code, def.Version())
	}
	check(def, "TASKS.1")
	check(def, "TASKS.2")
	if w := want(def, "TASKS.1"); w.Action != string(triage.AutoReplay) {
		t.Fatalf("the default replays a timeout, decided %s: the test needs it to", w.Action)
	}

	// An override that makes timeouts permanent.
	doc := strings.Replace(string(triage.DefaultYAML()), "\n  timeout: transient\n", "\n  timeout: permanent\n", 1)
	over, err := triage.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SavePolicyOverride(ctx, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	code, body = b.get("/policy")
	var changed []string
	for _, m := range regexp.MustCompile(`<span class="d(?:add|del)">([^<]*)</span>`).FindAllStringSubmatch(body, -1) {
		changed = append(changed, strings.Join(strings.Fields(html.UnescapeString(m[1])), " "))
	}
	if code != 200 || cell(t, body, "policy-version") != over.Version() || !slices.Equal(changed, []string{"- timeout: transient", "+ timeout: permanent"}) {
		t.Errorf("GET /policy after the override = %d, version %s, changed lines %q; want version %s and the one line changed", code, cell(t, body, "policy-version"), changed, over.Version())
	}
	// The unchanged text is folded but for a few lines around the change.
	if n := strings.Count(body, `class="dsame"`); n > 8 || !strings.Contains(body, "unchanged lines") {
		t.Errorf("GET /policy after the override shows %d unchanged lines, want at most 2×3 of context and the rest folded", n)
	}
	check(over, "TASKS.1")
	if w := want(over, "TASKS.1"); w.Action == string(triage.AutoReplay) {
		t.Errorf("the override still replays a timeout")
	}

	// A partial override is laid over the default: the page lists the
	// rules in force and which come from the override.
	partial := "rules:\n  - {name: mine, match: {agent: [writer]}, action: escalate, strategy: none}\n  - {name: poison, delete: true}\n"
	laid, err := triage.ParseOverride([]byte(partial))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SavePolicyOverride(ctx, []byte(partial)); err != nil {
		t.Fatal(err)
	}
	code, body = b.get("/policy")
	if code != 200 || cell(t, body, "policy-version") != laid.Version() || !strings.Contains(body, `<li class="origin-override">mine:`) ||
		!strings.Contains(body, `<li class="origin-default">transient:`) || !strings.Contains(body, "Deleted by the override: poison") {
		t.Errorf("GET /policy with a partial override = %d, want version %s, mine from the override, transient from the default, poison deleted:\n%s", code, laid.Version(), body)
	}

	// An invalid override is not in force: the default is, and why is shown.
	if _, err := e.fs.Collection(triage.OverrideCollection).Doc(triage.OverrideDoc).Set(ctx, map[string]any{triage.OverrideField: "reasons: ["}); err != nil {
		t.Fatal(err)
	}
	code, body = b.get("/policy")
	if code != 200 || cell(t, body, "policy-version") != def.Version() || !strings.Contains(body, `id="policy-invalid"`) {
		t.Errorf("GET /policy with an invalid override = %d, want the default in force and the override shown invalid", code)
	}

	b.wantCodes(map[string]int{
		"/policy?entry=TASKS.404":         http.StatusNotFound,
		"/policy?entry=%25zz":             http.StatusBadRequest,
		"/policy?entry=a&entry=b":         http.StatusBadRequest,
		"/policy?colour=red":              http.StatusBadRequest,
		"/entries/TASKS.1?chunk=1&done=x": http.StatusOK,
	})
	if diff := diffSnap(before, e.snapshot(t)); diff != "" {
		t.Errorf("the policy page changed state: %s", diff)
	}
}

// The failure record is shown as fields, not a struct dump.
func TestEntryFailureFields(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	no := false
	at := time.Date(2026, 11, 21, 13, 4, 5, 0, time.UTC)
	e.seed(t, "acme", "TASKS.1", store.Escalated, `{}`, func(en *store.Entry) {
		en.Failure = &jevent.Failure{Code: "partial_external_write", Detail: "tool <crm> wrote 2 of 3 rows", Attempt: 2, Agent: "closer",
			CompletedSteps: []string{"create-contact", "create-deal"}, Retryable: &no, ToolFailure: true, RecordedAt: at}
	})
	_, body := newBrowser(t, e.srv.URL).get("/entries/TASKS.1")
	i := strings.Index(body, `<dl class="facts" id="failure">`)
	if i < 0 {
		t.Fatalf("entry page has no failure fields:\n%s", body)
	}
	box := body[i : i+strings.Index(body[i:], "</dl>")]
	for _, want := range []string{
		"<dt>Code</dt><dd><code>partial_external_write</code></dd>",
		"tool &lt;crm&gt; wrote 2 of 3 rows",
		"<dt>Attempt</dt><dd>2</dd>",
		"<dt>Agent</dt><dd>closer</dd>",
		"<li>create-contact</li><li>create-deal</li>",
		"<dt>Retryable</dt><dd>no (the agent says so)</dd>",
		"<dt>Tool failure</dt><dd>yes</dd>",
		"<dt>Recorded at</dt><dd>2026-11-21 13:04:05Z</dd>",
	} {
		if !strings.Contains(box, want) {
			t.Errorf("failure box lacks %q:\n%s", want, box)
		}
	}
	if strings.Contains(body, "&amp;{") || strings.Contains(body, "&{") {
		t.Errorf("entry page still prints a Go struct dump")
	}
}

// Payloads over 256 KiB are shown a chunk at a time: size and sha256 of the
// whole, navigation, every chunk in order adding up to the whole (text and
// JSON) or to a hex dump whose offsets continue (binary); bad chunk numbers
// are 400; no payload byte is rendered unescaped.
func TestEntryPayloadChunks(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	hostile := `</pre><script>alert(1)</script>`
	var items []string
	for i := range 9000 {
		items = append(items, fmt.Sprintf(`{"n":%d,"note":%q}`, i, hostile))
	}
	bigJSON := "[" + strings.Join(items, ",") + "]" // ~470 KiB raw, more pretty-printed
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, []byte(bigJSON), "", "  "); err != nil {
		t.Fatal(err)
	}
	binary := bytes.Repeat([]byte("\x00\xff<script>\x1b"), 10000) // 110 000 bytes, not UTF-8
	e.seed(t, "acme", "TASKS.1", store.Escalated, bigJSON)
	e.seed(t, "acme", "TASKS.2", store.Escalated, string(binary))
	e.seed(t, "acme", "TASKS.3", store.Escalated, "small <b>text</b>")
	b := newBrowser(t, e.srv.URL)

	payload := func(body string) string {
		t.Helper()
		i := strings.Index(body, `<pre class="box" id="payload">`)
		if i < 0 {
			t.Fatalf("no payload box")
		}
		rest := body[i+len(`<pre class="box" id="payload">`):]
		text := rest[:strings.Index(rest, "</pre>")]
		if strings.Contains(text, "<") {
			t.Errorf("payload box renders a raw '<': %.200q", text[strings.Index(text, "<"):])
		}
		return html.UnescapeString(text)
	}
	code, body := b.get("/entries/TASKS.1")
	sum := sha256.Sum256([]byte(bigJSON))
	chunks := pretty.Len()/(256<<10) + 1
	if code != 200 || !strings.Contains(body, fmt.Sprintf("%d bytes · sha256 <code>%s</code> · json", len(bigJSON), hex.EncodeToString(sum[:]))) ||
		!strings.Contains(body, fmt.Sprintf("Chunk 1 of %d", chunks)) || !strings.Contains(body, `id="chunk-next" href="/entries/TASKS.1?chunk=2"`) ||
		strings.Contains(body, `id="chunk-prev"`) || strings.Contains(body, `id="edit-payload"`) {
		t.Fatalf("GET /entries/TASKS.1 = %d, want chunk 1 of %d with the whole payload's size and sha256, a next link, no edit form", code, chunks)
	}
	var all strings.Builder
	all.WriteString(payload(body))
	for n := 2; n <= chunks; n++ {
		code, body := b.get(fmt.Sprintf("/entries/TASKS.1?chunk=%d", n))
		if code != 200 || !strings.Contains(body, fmt.Sprintf("Chunk %d of %d", n, chunks)) || !strings.Contains(body, `id="chunk-prev"`) {
			t.Fatalf("chunk %d = %d, want it with a link back", n, code)
		}
		if (n == chunks) == strings.Contains(body, `id="chunk-next"`) {
			t.Errorf("chunk %d of %d: a next link only before the last", n, chunks)
		}
		all.WriteString(payload(body))
	}
	if all.String() != pretty.String() {
		t.Errorf("the chunks add up to %d bytes, want the %d of the pretty-printed payload", all.Len(), pretty.Len())
	}

	code, body = b.get("/entries/TASKS.2?chunk=2")
	dump := payload(body)
	if code != 200 || !strings.Contains(body, "110000 bytes") || !strings.Contains(body, "binary") || !strings.Contains(body, "Chunk 2 of 2") ||
		!strings.HasPrefix(dump, "00010000  ") || !strings.Contains(dump, "...<script>...") {
		t.Errorf("binary chunk 2 = %d, want the hex dump from offset 0x10000 with the bytes shown safely; starts %.80q", code, dump)
	}
	code, body = b.get("/entries/TASKS.3")
	if code != 200 || payload(body) != "small <b>text</b>" || strings.Contains(body, `id="chunks"`) || !strings.Contains(body, `id="edit-payload"`) {
		t.Errorf("small text payload = %d, want it whole, escaped, editable and without chunk navigation", code)
	}
	for _, bad := range []string{"chunk=0", "chunk=-1", fmt.Sprintf("chunk=%d", chunks+1), "chunk=x", "chunk=1&chunk=2", "chunk=", "chunk=99999999999999999999"} {
		if code, _ := b.get("/entries/TASKS.1?" + bad); code != http.StatusBadRequest {
			t.Errorf("GET /entries/TASKS.1?%s = %d, want 400", bad, code)
		}
	}
	if code, _ := b.get("/entries/TASKS.2?chunk=3"); code != http.StatusBadRequest {
		t.Errorf("binary chunk 3 of 2 = %d, want 400", code)
	}
}

// downScheduler is Cloud Tasks refusing every new task.
type downScheduler struct{ *tasks.Scheduler }

func (downScheduler) Schedule(context.Context, tasks.Request) (string, bool, error) {
	return "", false, errors.New("injected: cloud tasks unavailable")
}

// An action recorded whose replay task cannot be created (Cloud Tasks
// down) is not an internal error: the entry moved, reconcile creates the
// task, and a retry would only meet a 409. The page says so, the tenant API
// answers 200 with a note, and a link cannot put words of its own on a page
// (?done= takes only the actions' keys).
func TestActionRecordedWithItsTaskPending(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{"a":1}`)
	e.seed(t, "acme", "TASKS.2", store.AwaitingApproval, `{"a":2}`)
	down := operator.New(e.st, downScheduler{e.sched})
	srv := httptest.NewServer(console.New(e.st, down, console.LocalAuth("ops@example.com"), console.WithTaskState(e.sched)).Handler())
	t.Cleanup(srv.Close)

	b := newBrowser(t, srv.URL)
	b.get("/entries/TASKS.1")
	code, loc, body := b.post("/entries/TASKS.1/approve", url.Values{"csrf": {b.csrf}, "headers": {""}, "step": {"confirm"}})
	if code != http.StatusSeeOther || loc != "/entries/TASKS.1?done=approved-task-pending" {
		t.Fatalf("approve with Cloud Tasks down = %d %q, want a redirect saying the task is pending:\n%s", code, loc, body)
	}
	if _, page := b.get(loc); !strings.Contains(page, "reconcile&#39;s next run creates it") {
		t.Errorf("the entry page does not say the task is left to reconcile")
	}
	if got, err := e.st.GetMeta(ctx, "TASKS.1"); err != nil || got.Status != store.Scheduled {
		t.Errorf("TASKS.1 after the approval = %+v, %v, want scheduled", got, err)
	}
	if _, page := b.get("/entries/TASKS.1?done=" + url.QueryEscape("Your account is locked, call +1 555 0100")); strings.Contains(page, "locked") {
		t.Errorf("?done= put its own words on the page")
	}

	key, _, err := e.st.CreateTenantKey(ctx, "acme", "test")
	if err != nil {
		t.Fatal(err)
	}
	code, body = do(t, "POST", srv.URL+"/api/v1/tenants/acme/entries/TASKS.2:replay", key, "")
	if code != http.StatusOK || !strings.Contains(body, `"note"`) || !strings.Contains(body, `"status": "scheduled"`) {
		t.Errorf("tenant replay with Cloud Tasks down = %d %s, want 200 with the scheduled entry and a note", code, body)
	}
}
