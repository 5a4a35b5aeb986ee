package console_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
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
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if m := csrfInput.FindStringSubmatch(string(body)); m != nil {
		b.csrf = m[1]
	}
	return resp.StatusCode, string(body)
}

func (b *browser) post(path string, form url.Values) (int, string, string) {
	b.t.Helper()
	resp, err := b.c.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if m := csrfInput.FindStringSubmatch(string(body)); m != nil {
		b.csrf = m[1]
	}
	return resp.StatusCode, resp.Header.Get("Location"), string(body)
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
	if string(en.Payload) != edited || !strings.Contains(historyBy(en), "ops@example.com") {
		t.Errorf("approved entry payload %q, history %s; want the edit, by ops@example.com", en.Payload, historyBy(en))
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
	sign := func(k *ecdsa.PrivateKey, kid string, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
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
	if who, err := auth.Operator(req(sign(key, "k1", good))); err != nil || who != "ops@example.com" {
		t.Errorf("Operator(good) = %q, %v, want ops@example.com", who, err)
	}
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, good)
	hsTok, _ := hs.SignedString([]byte("secret"))
	for name, h := range map[string]string{
		"none":         "",
		"garbage":      "a.b.c",
		"other key":    sign(other, "k1", good),
		"unknown kid":  sign(key, "k2", good),
		"other aud":    sign(key, "k1", with("aud", "/projects/1/locations/r/services/other")),
		"other issuer": sign(key, "k1", with("iss", "https://accounts.google.com")),
		"expired":      sign(key, "k1", with("exp", now.Add(-time.Hour).Unix())),
		"no email":     sign(key, "k1", with("email", "")),
		"HS256":        hsTok,
		"no expiry":    sign(key, "k1", with("exp", nil)),
	} {
		if _, err := auth.Operator(req(h)); !errors.Is(err, console.ErrUnauthenticated) {
			t.Errorf("Operator(%s) = %v, want ErrUnauthenticated", name, err)
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
