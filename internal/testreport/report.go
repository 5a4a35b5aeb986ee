package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// testEvent is one line of `go test -json` (cmd/test2json's TestEvent).
type testEvent struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output and build-fail
	FailedBuild string
}

// timing is a test's or a package's wall time.
type timing struct {
	Package, Test string
	Seconds       float64
}

// Summary is what a run added up to: the counts say whether a change lost
// tests (subtests and fuzz seeds count one each), the timings where the
// time went.
type Summary struct {
	Passed, Failed, Skipped int
	Tests, Packages         []timing // top-level tests and packages, in the order they ended
	FailedTests             []string // "package TestName", subtests included
	FailedPackages          []string
}

// reporter turns the event stream back into what plain `go test` prints:
// a line per package, and the output of the tests that failed; the rest of
// a test's output is dropped when it passes, as go test does without -v.
type reporter struct {
	out io.Writer
	sum Summary
	// held is the output of each running test of a package, kept until
	// the test ends; lines in the order they came, tagged with their test.
	held map[string][]heldLine
}

type heldLine struct{ test, text string }

// Report reads `go test -json` from in and writes the readable output to
// out; lines that are not test events (a build error, a message of the
// command that ran go test) are copied through unchanged.
func Report(in io.Reader, out io.Writer) (Summary, error) {
	r := &reporter{out: out, held: map[string][]heldLine{}}
	sc := bufio.NewScanner(in)
	// A test may print a long line (a JSON body, a stack trace).
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev testEvent
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		r.event(ev)
	}
	// Whatever is still held belongs to tests that never ended: the test
	// binary died under them, and their output says how.
	for pkg := range r.held {
		r.flush(pkg, func(heldLine) bool { return true })
	}
	if err := sc.Err(); err != nil {
		return r.sum, fmt.Errorf("testreport: read go test -json: %w", err)
	}
	return r.sum, nil
}

func (r *reporter) event(ev testEvent) {
	switch ev.Action {
	case "build-output":
		io.WriteString(r.out, ev.Output)
		return
	case "build-fail":
		return
	}
	if ev.Test == "" {
		r.packageEvent(ev)
		return
	}
	switch ev.Action {
	case "output":
		if framing(ev.Output) {
			return
		}
		r.held[ev.Package] = append(r.held[ev.Package], heldLine{ev.Test, ev.Output})
	case "pass":
		r.sum.Passed++
		r.ended(ev, false)
	case "skip":
		r.sum.Skipped++
		r.ended(ev, false)
	case "fail":
		r.sum.Failed++
		r.sum.FailedTests = append(r.sum.FailedTests, shortPackage(ev.Package)+" "+ev.Test)
		r.ended(ev, true)
	}
}

// ended handles a test's last event. A test that passed takes its output
// (and its subtests') with it, as go test without -v does; a failed
// subtest's output stays held until its top-level test ends, so that the
// failure prints the whole story in the order it happened.
func (r *reporter) ended(ev testEvent, failed bool) {
	mine := func(l heldLine) bool { return l.test == ev.Test || strings.HasPrefix(l.test, ev.Test+"/") }
	if !failed {
		r.held[ev.Package] = slices.DeleteFunc(r.held[ev.Package], mine)
	}
	if strings.Contains(ev.Test, "/") {
		return
	}
	r.sum.Tests = append(r.sum.Tests, timing{ev.Package, ev.Test, ev.Elapsed})
	if failed {
		r.flush(ev.Package, mine)
	}
}

// flush prints and forgets the held lines of pkg that pick selects.
func (r *reporter) flush(pkg string, pick func(heldLine) bool) {
	var keep []heldLine
	for _, l := range r.held[pkg] {
		if pick(l) {
			io.WriteString(r.out, l.text)
		} else {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		delete(r.held, pkg)
		return
	}
	r.held[pkg] = keep
}

func (r *reporter) packageEvent(ev testEvent) {
	switch ev.Action {
	case "output":
		// go test prints "ok", "FAIL", "?" lines and whatever TestMain
		// printed; the bare PASS is the test binary's, which go test
		// swallows without -v. Before a FAIL line goes the output of the
		// tests that never ended (a panic, a timeout): it says why.
		if strings.HasPrefix(ev.Output, "FAIL") {
			r.flush(ev.Package, func(heldLine) bool { return true })
		}
		if ev.Output != "PASS\n" {
			io.WriteString(r.out, ev.Output)
		}
	case "pass", "fail":
		// A package's end: nothing of it may stay held.
		r.flush(ev.Package, func(heldLine) bool { return true })
		r.sum.Packages = append(r.sum.Packages, timing{Package: ev.Package, Seconds: ev.Elapsed})
		if ev.Action == "fail" {
			r.sum.FailedPackages = append(r.sum.FailedPackages, shortPackage(ev.Package))
		}
	}
}

// framing reports whether a test's output line is test2json's framing,
// which go test prints only with -v.
func framing(s string) bool {
	for _, p := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME ", "--- PASS: ", "--- SKIP: "} {
		if strings.HasPrefix(strings.TrimLeft(s, " "), p) {
			return true
		}
	}
	return false
}

// shortPackage drops the module path's common prefix for the tables.
func shortPackage(p string) string {
	const module = "github.com/jsdlq/jsdlq"
	if p == module {
		return "."
	}
	return strings.TrimPrefix(p, module+"/")
}

// WriteSlowest writes the top n tests and packages by wall time and the
// counts of the run.
func (s Summary) WriteSlowest(w io.Writer, n int) {
	fmt.Fprintf(w, "\n%d slowest tests:\n", min(n, len(s.Tests)))
	for _, t := range slowest(s.Tests, n) {
		fmt.Fprintf(w, "  %7.1fs  %-28s %s\n", t.Seconds, shortPackage(t.Package), t.Test)
	}
	fmt.Fprintf(w, "%d slowest packages:\n", min(n, len(s.Packages)))
	for _, t := range slowest(s.Packages, n) {
		fmt.Fprintf(w, "  %7.1fs  %s\n", t.Seconds, shortPackage(t.Package))
	}
	fmt.Fprintf(w, "tests (subtests and fuzz seeds included): %d passed, %d failed, %d skipped; %d packages\n",
		s.Passed, s.Failed, s.Skipped, len(s.Packages))
	if len(s.FailedTests) > 0 || len(s.FailedPackages) > 0 {
		fmt.Fprintf(w, "FAILED: %s\n", strings.Join(append(s.FailedTests, s.FailedPackages...), ", "))
	}
}

func slowest(ts []timing, n int) []timing {
	ts = slices.Clone(ts)
	slices.SortStableFunc(ts, func(a, b timing) int { return cmp.Compare(b.Seconds, a.Seconds) })
	return ts[:min(n, len(ts))]
}
