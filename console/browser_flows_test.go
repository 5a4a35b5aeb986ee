package console_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// axeDir holds the npm package of axe-core the accessibility scan injects
// (its package-lock.json pins the version; node_modules is not tracked).
const axeDir = "testdata/axe"

var (
	axeOnce sync.Once
	axeJS   string
	axeErr  error
)

// axeSource is axe-core's script, installed with npm ci on first use.
// Without npm the test is skipped on a developer's machine and fails in CI,
// as without chromium.
func axeSource(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, "npm")
	if _, err := exec.LookPath("npm"); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("CI is set but npm is not on PATH: the accessibility scan installs axe-core with it")
		}
		t.Skip("no npm on PATH: the accessibility scan installs axe-core with it")
	}
	axeOnce.Do(func() {
		script := filepath.Join(axeDir, "node_modules", "axe-core", "axe.min.js")
		if _, err := os.Stat(script); err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
			cmd.Dir = axeDir
			if out, err := cmd.CombinedOutput(); err != nil {
				axeErr = errors.New("npm ci in " + axeDir + ": " + err.Error() + "\n" + string(out))
				return
			}
		}
		b, err := os.ReadFile(script)
		axeJS, axeErr = string(b), err
	})
	if axeErr != nil {
		t.Fatal(axeErr)
	}
	return axeJS
}

// scheme emulates the operator's colour scheme preference.
func (c *chrome) scheme(dark bool) {
	c.t.Helper()
	v := "light"
	if dark {
		v = "dark"
	}
	if _, err := chromedp.Call(c.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}}}); err != nil {
		c.t.Fatalf("emulate prefers-color-scheme: %s: %v", v, err)
	}
}

// axeFindings injects axe-core into the page shown and returns its
// serious and critical violations, each with where it is.
func (c *chrome) axeFindings(src string) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](src+";true")); err != nil {
		c.t.Fatalf("inject axe-core: %v", err)
	}
	const run = `axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations
		.filter(v => v.impact === "serious" || v.impact === "critical")
		.map(v => v.id + " (" + v.impact + "): " + v.help + " at " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join("; ")))`
	found, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](run, chromedp.EvalAwaitPromise))
	if err != nil {
		c.t.Fatalf("run axe-core: %v", err)
	}
	return found
}

// a11y scans the page shown in the light and the dark scheme.
func (c *chrome) a11y(src, page string) {
	c.t.Helper()
	for _, dark := range []bool{false, true} {
		c.scheme(dark)
		for _, v := range c.axeFindings(src) {
			c.t.Errorf("axe on %s (dark %v): %s", page, dark, v)
		}
	}
	c.scheme(false)
}

// TestBrowserOperatorFlows drives, in a real chromium, what an operator
// does most: filter the entries (any case) with a count, select rows and
// replay them, discard an entry after confirming, confirm a bulk redrive at
// a typed rate the run then has, and close a breaker, which releases its
// tenant's held entries; and it scans every page with axe-core, light and
// dark.
func TestBrowserOperatorFlows(t *testing.T) {
	c := newChrome(t)
	axe := axeSource(t)
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	e.runner(t, "flows", e.op)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	permanent := func(en *store.Entry) {
		en.Category, en.ReasonCode, en.Action, en.Strategy = "permanent", "impossible_task", "escalate", "none"
	}
	e.seed(t, "T05", "TASKS.1", store.Escalated, `{"task":1}`, permanent)
	e.seed(t, "T05", "TASKS.2", store.Escalated, `{"task":2}`, permanent)
	e.seed(t, "T05", "TASKS.3", store.Scheduled, `{"task":3}`)
	e.seed(t, "acme", "TASKS.4", store.Escalated, `{"task":4}`, permanent)
	e.seed(t, "acme", "TASKS.5", store.Escalated, `{"task":5}`, permanent)
	e.openBreaker(t, "globex")
	e.seed(t, "globex", "TASKS.20", store.Held, `{"task":20}`)
	e.seed(t, "globex", "TASKS.21", store.Held, `{"task":21}`)
	base := e.srv.URL
	status := func(id string) store.Status {
		t.Helper()
		got, err := e.st.GetMeta(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return got.Status
	}

	// Filter: the tenant typed in another case, a category; the count.
	c.do("filter the entries",
		chromedp.Navigate(base+"/entries"),
		chromedp.WaitVisible(chromedp.ID("filter")),
		chromedp.SendKeys(chromedp.CSS(`input[name="tenant"]`), "t05"),
		chromedp.SetValue(chromedp.CSS(`select[name="category"]`), "permanent"),
		// The unfiltered page has the same elements: mark it, and wait for
		// the count on a page without the mark.
		chromedp.Evaluate[chromedp.Void](`document.body.dataset.replaced = "1"`),
		chromedp.Click(chromedp.ID("filter")),
		chromedp.WaitVisible(chromedp.CSS(`body:not([data-replaced]) #matching`)),
	)
	if got := c.text("read the count", "#matching"); got != "2 matching entries" {
		t.Errorf("tenant t05, category permanent: count = %q, want 2 matching entries (T05's two)", got)
	}
	if rows := c.text("read the rows", "table.entries tbody"); !strings.Contains(rows, "TASKS.2") || strings.Contains(rows, "TASKS.3") {
		t.Errorf("filtered rows = %q, want TASKS.1 and TASKS.2, not the transient TASKS.3", rows)
	}
	c.shot("entries-any-case")
	c.a11y(axe, "the filtered entries")

	// Select one row and replay it: an escalated entry is approved.
	before := e.published(t)
	c.do("replay the selected row",
		chromedp.Click(chromedp.CSS(`input.pick[value="TASKS.1"]`)),
		chromedp.Click(chromedp.ID("replay-selected")),
		chromedp.WaitVisible(chromedp.ID("selected-summary")),
	)
	if got := c.text("read the outcome", "#selected-summary"); got != "1 of 1 selected entry replayed." {
		t.Errorf("replay selected = %q, want 1 of 1 replayed", got)
	}
	e.waitPublished(t, before+1)
	if st := status("TASKS.2"); st != store.Escalated {
		t.Errorf("TASKS.2, not selected, is %s, want escalated", st)
	}
	c.shot("selected")
	c.a11y(axe, "the selection's outcome")

	// Discard: refused by the browser until confirmed.
	c.do("try to discard unconfirmed",
		chromedp.Navigate(base+"/entries/TASKS.2"),
		chromedp.WaitVisible(chromedp.ID("discard")),
		chromedp.SendKeys(chromedp.ID("discard-reason"), "duplicate of TASKS.1"),
		chromedp.Click(chromedp.ID("discard")),
	)
	if st := status("TASKS.2"); st != store.Escalated {
		t.Errorf("after an unconfirmed discard TASKS.2 is %s, want escalated", st)
	}
	c.shot("entry-discard")
	c.a11y(axe, "an entry")
	c.do("discard confirmed",
		chromedp.Click(chromedp.ID("discard-confirm")),
		chromedp.Click(chromedp.ID("discard")),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	if got := c.text("read the status", "#status"); got != string(store.Discarded) {
		t.Errorf("after a confirmed discard the status reads %q, want discarded", got)
	}

	// Bulk: the rate typed in the confirm form is the run's.
	c.do("plan a bulk redrive", chromedp.Navigate(base+"/bulk?tenant=acme"), chromedp.WaitVisible(chromedp.ID("bulk-rate")))
	if ids := c.text("read the plan's ids", "#bulk-first"); !strings.Contains(ids, "TASKS.4") || !strings.Contains(ids, "TASKS.5") {
		t.Errorf("plan lists %q, want TASKS.4 and TASKS.5", ids)
	}
	c.shot("bulk-confirm")
	c.a11y(axe, "a bulk plan")
	c.do("confirm at 1/m",
		chromedp.Clear(chromedp.ID("bulk-rate")),
		chromedp.SendKeys(chromedp.ID("bulk-rate"), "1/m"),
		chromedp.SendKeys(chromedp.ID("bulk-why"), "the agents are fixed"),
		chromedp.Click(chromedp.ID("bulk-confirm")),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	runs, err := e.st.ListBulkRuns(ctx, 5)
	if err != nil || len(runs) != 1 {
		t.Fatalf("ListBulkRuns() = %d runs, %v; want the one confirmed", len(runs), err)
	}
	if runs[0].Rate != 1.0/60 || runs[0].Reason != "the agents are fixed" {
		t.Errorf("run rate %g reason %q, want 1/60 per second (1/m typed in the confirm form) and the reason", runs[0].Rate, runs[0].Reason)
	}
	c.do("cancel the slow run",
		chromedp.Evaluate[chromedp.Void](`document.body.dataset.replaced = "1"`),
		chromedp.Click(chromedp.ID("bulk-cancel")),
		chromedp.WaitVisible(chromedp.CSS(`body:not([data-replaced]) #flash`)),
	)
	c.do("open the runs", chromedp.Navigate(base+"/bulk/runs"), chromedp.WaitVisible(chromedp.ID("bulk-runs")))
	if row := c.text("read the runs", "#bulk-runs tbody"); !strings.Contains(row, "tenant=acme") || !strings.Contains(row, "the agents are fixed") || !strings.Contains(row, "1/m") {
		t.Errorf("runs list = %q, want the filter, the reason and the rate", row)
	}
	c.shot("bulk-runs")
	c.a11y(axe, "the bulk runs")

	// Breakers: closing globex's releases its two held entries.
	c.do("open the tenants", chromedp.Navigate(base+"/tenants"), chromedp.WaitVisible(chromedp.ID("tenants")))
	if row := c.text("read globex's row", `#tenants tbody tr:first-child`); !strings.Contains(row, "globex") || !strings.Contains(row, "open") {
		t.Errorf("first tenant row = %q, want globex's open breaker", row)
	}
	if held := c.text("read globex's held count", `#tenants tbody tr:first-child td.num`); held != "2" {
		t.Errorf("globex held = %q, want 2", held)
	}
	c.shot("tenants-held")
	c.a11y(axe, "the tenants")
	c.do("close globex's breaker",
		chromedp.SendKeys(chromedp.CSS(`#tenants tbody tr:first-child input[name="reason"]`), "the provider is back"),
		chromedp.Click(chromedp.CSS(`#tenants tbody tr:first-child button.close-breaker`)),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	testenv.WaitUntil(t, 90*time.Second, "globex's held entries released", func() bool {
		return status("TASKS.20") != store.Held && status("TASKS.21") != store.Held
	})

	// Every other page, light and dark.
	for _, page := range []string{"/", "/entries", "/audits", "/policy", "/predictions", "/entries?q=TASKS"} {
		c.do("open "+page, chromedp.Navigate(base+page), chromedp.WaitVisible(chromedp.CSS("h1")))
		c.a11y(axe, page)
	}
}
