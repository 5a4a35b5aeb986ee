package console_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// screenshotDir is where JSDLQ_SCREENSHOTS=1 writes the pages the browser
// test visits (docs/console.md shows them); without it nothing is written,
// so `make test` leaves tracked files alone.
const screenshotDir = "../docs/console"

// chromium finds Debian's chromium. Without one the test is skipped on a
// developer's machine and fails in CI (CI=true), which must run it (.ci/run
// installs it).
func chromium(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, "chromium")
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal("CI is set but no chromium or chromium-browser is on PATH: .ci/run installs Debian's chromium (apt-get install chromium)")
	}
	t.Skip("no chromium or chromium-browser on PATH: the real-browser test needs one (apt-get install chromium)")
	return ""
}

// chrome is a headless chromium driven by chromedp, each step bounded:
// a hung browser fails the test, never the run.
type chrome struct {
	t   *testing.T
	ctx context.Context
}

// newChrome starts Debian's chromium (or skips, see chromium); it stops
// with the test.
func newChrome(t *testing.T) *chrome {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		// Chromium's sandbox refuses to start as root (CI containers).
		chromedp.Flag("no-sandbox", os.Geteuid() == 0),
		chromedp.UserDataDir(t.TempDir()),
	)
	// A generous bound on the whole browser session (the flows and the
	// accessibility scans take minutes on a busy machine); each step has
	// its own (do).
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(ctx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	// The first Run starts the browser and must not carry a step's timeout
	// (it would end the browser with the step).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", exe, err)
	}
	return &chrome{t: t, ctx: ctx}
}

// do runs one step's actions.
func (c *chrome) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	stepCtx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(stepCtx, actions...); err != nil {
		c.t.Fatalf("%s: %v", step, err)
	}
}

// text reads the text of the element sel.
func (c *chrome) text(step string, sel chromedp.CSS) string {
	c.t.Helper()
	stepCtx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(stepCtx, chromedp.Text(sel))
	if err != nil {
		c.t.Fatalf("%s: %v", step, err)
	}
	return s
}

// shot saves the page as docs/console/<name>.png with JSDLQ_SCREENSHOTS=1.
func (c *chrome) shot(name string) {
	c.t.Helper()
	if os.Getenv("JSDLQ_SCREENSHOTS") != "1" {
		return
	}
	stepCtx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(stepCtx, chromedp.FullScreenshot(100))
	if err != nil {
		c.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// TestBrowserApproveWithEditedPayload drives the operator console in a real
// headless chromium: the overview, the entries list filtered through its
// form, an entry, an approval with an edited payload and its diff, and the
// replay carrying the edit landing on the work stream.
func TestBrowserApproveWithEditedPayload(t *testing.T) {
	c := newChrome(t)
	ctx, do, text, shot := c.ctx, c.do, c.text, c.shot
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{"prompt":"write the launch post","max_tokens":120000}`)
	e.seed(t, "acme", "TASKS.2", store.Scheduled, `{"prompt":"summarise the ticket"}`)
	e.seed(t, "globex", "TASKS.3", store.Quarantined, `{"prompt":"translate the page"}`)
	base := e.srv.URL // httptest: 127.0.0.1 on a free port

	// Overview: the chart and the entries waiting for a human.
	do("open the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("svg.chart")))
	if body := text("read the overview", "main"); !strings.Contains(body, "TASKS.1") || !strings.Contains(body, "TASKS.3") || strings.Contains(body, "TASKS.2") {
		t.Errorf("overview shows %q, want the waiting TASKS.1 and TASKS.3, not the scheduled TASKS.2", body)
	}
	shot("overview")

	// Entries: filter by tenant and status through the form.
	do("filter the entries",
		chromedp.Navigate(base+"/entries"),
		chromedp.WaitVisible(chromedp.ID("filter")),
		chromedp.SendKeys(chromedp.CSS(`input[name="tenant"]`), "acme"),
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), string(store.AwaitingApproval)),
		// The unfiltered page links TASKS.1 too: mark it, and wait for the
		// link on a page without the mark (the filtered one).
		chromedp.Evaluate[chromedp.Void](`document.body.dataset.replaced = "1"`),
		chromedp.Click(chromedp.ID("filter")),
		chromedp.WaitVisible(chromedp.CSS(`body:not([data-replaced]) a[href="/entries/TASKS.1"]`)),
	)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if u, err := url.Parse(loc); err != nil || u.Query().Get("tenant") != "acme" || u.Query().Get("status") != string(store.AwaitingApproval) {
		t.Errorf("filtered list at %q, want tenant=acme and status=awaiting_approval in the query", loc)
	}
	if rows := text("read the list", "table.entries tbody"); !strings.Contains(rows, "TASKS.1") || strings.Contains(rows, "TASKS.2") || strings.Contains(rows, "TASKS.3") {
		t.Errorf("filtered list = %q, want TASKS.1 alone", rows)
	}
	shot("entries")

	// The entry: facts, payload, the approve form.
	do("open the entry", chromedp.Click(chromedp.CSS(`a[href="/entries/TASKS.1"]`)), chromedp.WaitVisible(chromedp.ID("payload")))
	if st := text("read the status", "#status"); st != string(store.AwaitingApproval) {
		t.Errorf("entry status = %q, want %s", st, store.AwaitingApproval)
	}
	if p := text("read the payload", "#payload"); !strings.Contains(p, "write the launch post") {
		t.Errorf("payload viewer = %q, want the entry's payload", p)
	}
	shot("entry")

	// Approve with an edited payload and a header: first the diff.
	edited := `{"prompt":"write the launch post","max_tokens":4000}`
	do("edit and review the approval",
		chromedp.Clear(chromedp.ID("edit-payload")),
		chromedp.SendKeys(chromedp.ID("edit-payload"), edited),
		chromedp.SendKeys(chromedp.ID("edit-headers"), "X-Context-Budget: 4000"),
		chromedp.Click(chromedp.ID("approve")),
		chromedp.WaitVisible(chromedp.ID("diff")),
	)
	// The diff compares the payloads pretty-printed, line by line.
	diff := text("read the diff", "#diff")
	var removed, added []string
	for _, line := range strings.Split(diff, "\n") {
		switch {
		case strings.HasPrefix(line, "-"):
			removed = append(removed, strings.TrimSpace(line[1:]))
		case strings.HasPrefix(line, "+"):
			added = append(added, strings.TrimSpace(line[1:]))
		}
	}
	if !slices.Equal(removed, []string{`"max_tokens": 120000`}) || !slices.Equal(added, []string{`"max_tokens": 4000`}) {
		t.Errorf("approval diff removes %q and adds %q, want max_tokens 120000 -> 4000 (diff %q)", removed, added, diff)
	}
	shot("approve")

	// Confirm: the replay carries the edit onto the work stream.
	before := e.published(t)
	do("confirm the approval", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("status")))
	e.waitPublished(t, before+1)
	work, err := e.js.Stream(ctx, jevent.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := work.GetMsg(ctx, before+1)
	if err != nil {
		t.Fatalf("read the replay from the work stream: %v", err)
	}
	if string(msg.Data) != edited || msg.Header.Get("X-Context-Budget") != "4000" {
		t.Errorf("replay on %s = %q with X-Context-Budget %q, want %q with 4000", msg.Subject, msg.Data, msg.Header.Get("X-Context-Budget"), edited)
	}

	// The entry's history names the operator; the page shows it.
	do("reopen the entry", chromedp.Navigate(base+"/entries/TASKS.1"), chromedp.WaitVisible(chromedp.CSS("ol.timeline")))
	if h := text("read the history", "ol.timeline"); !strings.Contains(h, "ops@example.com") {
		t.Errorf("history = %q, want the approval by ops@example.com", h)
	}
	// The edit is version 2; the original is version 1, kept.
	if v := text("read the versions", "#versions"); !strings.Contains(v, "version 1 · the original") || !strings.Contains(v, "edit of version 1 by ops@example.com") {
		t.Errorf("versions = %q, want the original and the edit by ops@example.com", v)
	}
	shot("entry-approved")

	do("open the tenants", chromedp.Navigate(base+"/tenants"), chromedp.WaitVisible(chromedp.CSS("h1")))
	shot("tenants")
}

// TestBrowserAuditsAndPolicy visits, in a real chromium, the overview over a
// week of history (its charts and rates), the audits list and a report, the
// policy page with an override's diff and an entry tested against it, and
// the chunked view of a large payload.
func TestBrowserAuditsAndPolicy(t *testing.T) {
	c := newChrome(t)
	// The console's clock is pinned (the seeded hours stay where they are
	// however long the test takes), a little ahead so that the entries
	// recorded now fall inside its windows.
	now := time.Now().UTC().Add(2 * time.Minute)
	e := newEnv(t, console.LocalAuth("ops@example.com"), console.WithClock(func() time.Time { return now }))
	ctx := testenv.Context(t)
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{"prompt":"write the launch post"}`)
	e.seed(t, "acme", "TASKS.2", store.Recovered, `{"prompt":"summarise the ticket"}`)
	e.seed(t, "globex", "TASKS.3", store.Escalated, `{"rows":[`+strings.Repeat(`{"id":1234567,"name":"a row of the export"},`, 9000)+`{}]}`)

	// A week of history: dead tasks by category and the work stream's samples.
	cats := []string{"transient", "conditionally_recoverable", "permanent", "poison"}
	seq := int64(1000)
	for k := 7*24 - 1; k >= 0; k-- {
		at := now.Add(-time.Duration(k) * time.Hour)
		for i, cat := range cats {
			if n := int64((k*7+i*5)%9) - int64(i*2); n > 0 {
				if err := e.st.AddMetrics(ctx, at, cat, store.Metrics{Total: n, ByCategory: map[string]int64{cat: n}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		first := seq
		seq += 400 + int64(k%13)*20
		if err := e.st.RecordSample(ctx, at, store.MetricsSample{Stream: jevent.DefaultWorkStream, FirstAt: at, LastAt: at, FirstLastSeq: first, LastSeq: seq}); err != nil {
			t.Fatal(err)
		}
	}
	finding := audit.NewFinding(audit.AlertMissingTask, "tasks", "", "1 scheduled entry had no Cloud Tasks task; it was recreated")
	finding.Example("TASKS.1")
	finding.Repair = &audit.Repair{Action: "recreate_task", RepairTotals: audit.RepairTotals{Planned: 1, Done: 1}}
	burst := audit.NewFinding(audit.AlertTenantPoisonBurst, "entries", "globex", "tenant globex has 5 poison entries in the last hour (more than 3)")
	burst.Example("globex")
	burst.Value, burst.Threshold = 5, 3
	for i := range 3 {
		at := now.Add(time.Duration(i-3) * 15 * time.Minute)
		r := &audit.Report{Schema: audit.Schema, RunID: at.Format("20060102T150405Z") + "-0000000" + strconv.Itoa(i), StartedAt: at, FinishedAt: at.Add(12 * time.Second),
			Budget: "4m0s", Complete: true, Alerts: []string{},
			Sections: []*audit.Section{{Name: "tasks", Status: audit.StatusComplete, Counts: map[string]int64{"scheduled": 4, "tasks": 4}},
				{Name: "entries", Status: audit.StatusComplete, Counts: map[string]int64{"scanned": 3}}}}
		if i == 2 {
			r.Findings, r.Alerts = []*audit.Finding{finding, burst}, []string{audit.AlertMissingTask, audit.AlertTenantPoisonBurst}
			r.Repairs = audit.RepairTotals{Planned: 1, Done: 1}
		}
		if err := e.st.SaveAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	doc := strings.Replace(string(triage.DefaultYAML()), "\n  timeout: transient\n", "\n  timeout: permanent\n", 1)
	if _, err := e.st.SavePolicyOverride(ctx, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	base := e.srv.URL

	c.do("open the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("chart-week")))
	if r := c.text("read the rates", "#rates"); !strings.Contains(r, "7 d") || !strings.Contains(r, "168 of 168") {
		t.Errorf("overview rates = %q, want the 7-day window sampled in every hour", r)
	}
	c.shot("overview-week")

	c.do("open the audits", chromedp.Navigate(base+"/audits"), chromedp.WaitVisible(chromedp.ID("audits")))
	if rows := c.text("read the audits", "#audits tbody"); strings.Count(rows, "-0000000") != 3 {
		t.Errorf("audits list = %q, want 3 reports", rows)
	}
	c.shot("audits")
	c.do("open the newest report", chromedp.Click(chromedp.CSS(`#audits tbody a`)), chromedp.WaitVisible(chromedp.ID("sections")))
	if body := c.text("read the report", "main"); !strings.Contains(body, audit.AlertMissingTask) || !strings.Contains(body, audit.AlertTenantPoisonBurst) {
		t.Errorf("report = %q, want both alerts", body)
	}
	c.shot("audit")

	c.do("open the policy", chromedp.Navigate(base+"/policy"), chromedp.WaitVisible(chromedp.ID("policy-diff")))
	c.do("test an entry",
		chromedp.SendKeys(chromedp.CSS(`input[name="entry"]`), "TASKS.1"),
		chromedp.Click(chromedp.ID("policy-test")),
		chromedp.WaitVisible(chromedp.ID("policy-result")),
	)
	if got := c.text("read the tested action", "#test-action"); got != string(triage.Escalate) {
		t.Errorf("policy test of a timeout under the override = %q, want %s", got, triage.Escalate)
	}
	c.shot("policy")

	c.do("open a large payload", chromedp.Navigate(base+"/entries/TASKS.3"), chromedp.WaitVisible(chromedp.ID("chunks")))
	c.do("next chunk", chromedp.Click(chromedp.ID("chunk-next")), chromedp.WaitVisible(chromedp.ID("chunk-prev")))
	if nav := c.text("read the chunk navigation", "#chunks"); !strings.Contains(nav, "Chunk 2 of") {
		t.Errorf("chunk navigation = %q, want chunk 2", nav)
	}
	c.shot("entry-chunk")
}
