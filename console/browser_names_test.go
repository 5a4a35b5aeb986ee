package console_test

import (
	"net/url"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// TestBrowserPathShapedTenantClosesItsOwnBreaker drives the tenants page in
// a real chromium. The tenant "../entries/TASKS.1/discard?" names, as a
// relative path, the discard of another tenant's entry; its breaker's Close
// form (with the operator's CSRF token and reason) once posted there. Now
// it closes that tenant's breaker and nothing else: another tenant's
// breaker stays open and the entry the name points at is unchanged.
func TestBrowserPathShapedTenantClosesItsOwnBreaker(t *testing.T) {
	c := newChrome(t)
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	victim := e.seed(t, "victim", "TASKS.1", store.Escalated, `{"v":1}`)
	const tenant = "../entries/TASKS.1/discard?"
	e.openBreaker(t, tenant)
	e.openBreaker(t, "bystander")
	action, err := jevent.URLPath("tenants", tenant, "close")
	if err != nil {
		t.Fatal(err)
	}
	form := `form[action=` + strconv.Quote(action) + `]`
	c.do("close the path-shaped tenant's breaker",
		chromedp.Navigate(e.srv.URL+"/tenants"),
		chromedp.WaitVisible(chromedp.CSS(form)),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="reason"]`), "the tenant's storm is over"),
		chromedp.Click(chromedp.CSS(form+` button`)),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	if flash := c.text("read the flash", "#flash"); flash != "breaker closed" {
		t.Errorf("flash = %q, want breaker closed", flash)
	}
	loc, err := chromedp.Run(c.ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if u, err := url.Parse(loc); err != nil || u.Path != "/tenants" {
		t.Errorf("after the close the browser is at %q, want the tenants page", loc)
	}
	if b, err := e.st.GetBreaker(ctx, tenant); err != nil || b.State != store.BreakerClosed {
		t.Errorf("breaker of %q = %+v, %v, want closed", tenant, b, err)
	} else if h := b.History[len(b.History)-1]; h.By != "ops@example.com" {
		t.Errorf("breaker of %q last changed by %q, want the operator", tenant, h.By)
	}
	if b, err := e.st.GetBreaker(ctx, "bystander"); err != nil || b.State != store.BreakerOpen {
		t.Errorf("breaker of bystander = %+v, %v, want still open", b, err)
	}
	if got, err := e.st.GetMeta(ctx, victim.ID); err != nil || got.Status != store.Escalated || len(got.History) != 1 {
		t.Errorf("entry %s = %+v, %v, want escalated with its history untouched", victim.ID, got, err)
	}
	if b, err := e.st.GetBreaker(ctx, "victim"); err != nil || b.State != store.BreakerClosed || len(b.History) != 0 {
		t.Errorf("breaker of victim = %+v, %v, want never overridden", b, err)
	}
}
