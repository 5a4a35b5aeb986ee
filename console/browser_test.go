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
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
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

// TestBrowserApproveWithEditedPayload drives the operator console in a real
// headless chromium: the overview, the entries list filtered through its
// form, an entry, an approval with an edited payload and its diff, and the
// replay carrying the edit landing on the work stream.
func TestBrowserApproveWithEditedPayload(t *testing.T) {
	exe := chromium(t)
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{"prompt":"write the launch post","max_tokens":120000}`)
	e.seed(t, "acme", "TASKS.2", store.Scheduled, `{"prompt":"summarise the ticket"}`)
	e.seed(t, "globex", "TASKS.3", store.Quarantined, `{"prompt":"translate the page"}`)
	base := e.srv.URL // httptest: 127.0.0.1 on a free port

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		// Chromium's sandbox refuses to start as root (CI containers).
		chromedp.Flag("no-sandbox", os.Geteuid() == 0),
		chromedp.UserDataDir(t.TempDir()),
	)
	// Every step is bounded: a hung browser fails the test, never the run.
	ctx, cancel := context.WithTimeout(testenv.Context(t), 2*time.Minute)
	defer cancel()
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(ctx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	// The first Run starts the browser and must not carry a step's timeout
	// (it would end the browser with the step).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", exe, err)
	}
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(stepCtx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	text := func(step string, sel chromedp.CSS) string {
		t.Helper()
		stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(stepCtx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return s
	}
	shot := func(name string) {
		t.Helper()
		if os.Getenv("JSDLQ_SCREENSHOTS") != "1" {
			return
		}
		stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		png, err := chromedp.Run(stepCtx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

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
		chromedp.Click(chromedp.ID("filter")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/entries/TASKS.1"]`)),
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
	shot("entry-approved")

	do("open the tenants", chromedp.Navigate(base+"/tenants"), chromedp.WaitVisible(chromedp.CSS("h1")))
	shot("tenants")
}
