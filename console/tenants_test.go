package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Closing a breaker that holds entries starts a bulk run that releases
// them through the gates (each a replay with a task due now) and leads to
// it; closing one that holds none goes back to the tenants page. The page
// counts each tenant's held entries, offers its held and scheduled entries
// as probes, says a change's actor once, shows no "opened" time for a
// closed breaker, and searches and pages its tenants.
func TestTenantsCloseReleasesHeld(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	e.runner(t, "tenants", e.op)
	ctx := testenv.Context(t)
	e.openBreaker(t, "globex")
	e.openBreaker(t, "initech")
	e.seed(t, "globex", "TASKS.1", store.Held, `{}`)
	e.seed(t, "globex", "TASKS.2", store.Held, `{}`)
	e.seed(t, "acme", "TASKS.3", store.Held, `{}`)
	b := newBrowser(t, e.srv.URL)
	code, body := b.get("/tenants?q=GLOB")
	if code != 200 || !strings.Contains(body, `<option>TASKS.1</option>`) || strings.Contains(body, "initech") {
		t.Fatalf("GET /tenants?q=GLOB = %d, want globex alone with its held entries to probe:\n%.800s", code, body)
	}
	if m := regexp.MustCompile(`<td class="num"><a [^>]*>(\d+)</a>`).FindStringSubmatch(body); m == nil || m[1] != "2" {
		t.Errorf("globex's held count = %v, want 2", m)
	}

	code, loc, body := b.post("/tenants/globex/close", url.Values{"csrf": {b.csrf}, "reason": {"provider back"}})
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/bulk/") || !strings.HasSuffix(loc, "?done=breaker-closed-releasing") {
		t.Fatalf("close globex = %d %q, want a redirect to the run releasing its held entries:\n%.300s", code, loc, body)
	}
	testenv.WaitUntil(t, time.Minute, "globex's held entries released", func() bool {
		for _, id := range []string{"TASKS.1", "TASKS.2"} {
			if en, err := e.st.GetMeta(ctx, id); err != nil || en.Status == store.Held {
				return false
			}
		}
		return true
	})
	if en, err := e.st.GetMeta(ctx, "TASKS.3"); err != nil || en.Status != store.Held {
		t.Errorf("acme's held entry = %v %v, want still held (another tenant)", en, err)
	}
	e.waitPublished(t, 2)

	code, loc, _ = b.post("/tenants/initech/close", url.Values{"csrf": {b.csrf}, "reason": {"nothing held"}})
	if code != http.StatusSeeOther || loc != "/tenants?done=breaker-closed" {
		t.Errorf("close initech (nothing held) = %d %q, want back to the tenants page", code, loc)
	}
	_, body = b.get("/tenants?q=initech")
	if n := strings.Count(body, "closed by ops@example.com"); n != 1 {
		t.Errorf("initech's last change names its actor %d times, want once:\n%.600s", n, body)
	}
	if strings.Contains(body, "opened ") {
		t.Errorf("a closed breaker shows when it opened:\n%.600s", body)
	}

	for i := range 30 {
		e.openBreaker(t, fmt.Sprintf("tenant-%02d", i))
	}
	tests := []struct {
		query string
		code  int
		want  string
	}{
		{"", 200, "33 breakers"},
		{"page=2", 200, "page 2 of 2"},
		{"page=3", 400, ""},
		{"page=x", 400, ""},
		{"q=TENANT-1", 200, "10 breakers"},
		{"tenant=acme", 400, ""},
	}
	for _, tt := range tests {
		code, body := b.get("/tenants?" + tt.query)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("GET /tenants?%s = %d, want %d and %q:\n%.300s", tt.query, code, tt.code, tt.want, body)
		}
	}
}
