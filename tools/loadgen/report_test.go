package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
BenchmarkForward-2   	   20000	    154705 ns/op	  6000 events/s	  0.62 ratio-vs-pipeline
BenchmarkForward-2   	--- FAIL: BenchmarkForward-2
BenchmarkForward-2   	   20000	    159016 ns/op	  4000 events/s	  0.58 ratio-vs-pipeline
BenchmarkForward-2   	   20000	    118673 ns/op	  7000 events/s	  0.86 ratio-vs-pipeline
BenchmarkClassify/inflight=8-2         	     600	   4023376 ns/op	       248.5 events/s	         1.000 fs-reads/entry
PASS
`
	path := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := parseGoBench(path)
	if err != nil {
		t.Fatalf("parseGoBench() = %v", err)
	}
	for _, tc := range []struct {
		name, unit string
		want       float64
		ok         bool
	}{
		{"BenchmarkForward", "events/s", 6000, true}, // median of three runs; the failed line is skipped
		{"BenchmarkForward", "ratio-vs-pipeline", 0.62, true},
		{"BenchmarkClassify/inflight=8", "fs-reads/entry", 1, true},
		{"BenchmarkClassify/inflight=8", "events/s", 248.5, true},
		{"BenchmarkReplay", "reads/op", 0, false},
	} {
		got, ok := g.median(tc.name, tc.unit)
		if got != tc.want || ok != tc.ok {
			t.Errorf("median(%s, %s) = %v, %v, want %v, %v", tc.name, tc.unit, got, ok, tc.want, tc.ok)
		}
	}
	if got := runs(g, "BenchmarkForward", "events/s"); got != "3" {
		t.Errorf("runs(BenchmarkForward) = %s, want 3", got)
	}
}

// A rerun replaces the generated part and keeps the hand-written section.
func TestKeepFixes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "PERFORMANCE.md")
	old := "# Performance\n\nold table\n\n" + fixesHeading + " (by hand)\n\nbefore 90 s, after 19 s\n"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	got := keepFixes(path, "# Performance\n\nnew table\n")
	if !strings.Contains(got, "new table") || strings.Contains(got, "old table") || !strings.HasSuffix(got, "before 90 s, after 19 s\n") {
		t.Errorf("keepFixes() = %q, want the new table followed by the hand-written section", got)
	}
	if got := keepFixes(filepath.Join(t.TempDir(), "missing.md"), "fresh\n"); got != "fresh\n" {
		t.Errorf("keepFixes(no file) = %q, want the report unchanged", got)
	}
}

// The Firestore operations table has a row for each step whose benchmark
// ran, its source named without the sub-benchmark, and none for the others.
func TestRenderOpsRows(t *testing.T) {
	g := goBench{
		"BenchmarkClassify/inflight=8": {"fs-reads/entry": {1}, "fs-writes/entry": {3}},
		"BenchmarkEntryLife":           {"reads/entry": {5.5}, "writes/entry": {7.25}},
	}
	got, err := render(context.Background(), t.TempDir(), options{}, &results{}, &g)
	if err != nil {
		t.Fatalf("render() = %v", err)
	}
	for _, tc := range []struct {
		row  string
		want bool
	}{
		{"| classify, new entry (breaker closed) | 1.00 | 3.00 | BenchmarkClassify |\n", true},
		{"| the whole life: classify, replay, recovery, every reconcile run | 5.50 | 7.25 | BenchmarkEntryLife |\n", true},
		{"| replay (claim, idempotency lookup, breaker, publish, mark replayed) |", false},
		{"| reconcile over the entry's life", false},
	} {
		if strings.Contains(got, tc.row) != tc.want {
			t.Errorf("render() has row %q = %v, want %v", tc.row, !tc.want, tc.want)
		}
	}
}
