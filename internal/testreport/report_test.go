package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const pkgA, pkgB = "github.com/jsdlq/jsdlq/shared/a", "github.com/jsdlq/jsdlq/shared/b"

// stream encodes events as go test -json writes them, one a line.
func stream(t *testing.T, evs ...testEvent) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range evs {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func out(pkg, test, s string) testEvent {
	return testEvent{Action: "output", Package: pkg, Test: test, Output: s}
}

func end(action, pkg, test string, secs float64) testEvent {
	return testEvent{Action: action, Package: pkg, Test: test, Elapsed: secs}
}

func TestReport(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		summary Summary
	}{{
		name: "a passing package prints its ok line only",
		in: stream(t,
			testEvent{Action: "start", Package: pkgA},
			testEvent{Action: "run", Package: pkgA, Test: "TestX"},
			out(pkgA, "TestX", "=== RUN   TestX\n"),
			out(pkgA, "TestX", "    x_test.go:9: a log line of a passing test\n"),
			out(pkgA, "TestX", "--- PASS: TestX (1.50s)\n"),
			end("pass", pkgA, "TestX", 1.5),
			out(pkgA, "", "PASS\n"),
			out(pkgA, "", "ok  \tgithub.com/jsdlq/jsdlq/shared/a\t1.6s\n"),
			end("pass", pkgA, "", 1.6)),
		want: "ok  \tgithub.com/jsdlq/jsdlq/shared/a\t1.6s\n",
		summary: Summary{Passed: 1, Tests: []timing{{pkgA, "TestX", 1.5}},
			Packages: []timing{{Package: pkgA, Seconds: 1.6}}},
	}, {
		name: "a failing subtest prints its top-level test's story, passing siblings left out",
		in: stream(t,
			out(pkgA, "TestY", "=== RUN   TestY\n"),
			out(pkgA, "TestY/ok", "=== RUN   TestY/ok\n"),
			out(pkgA, "TestY/ok", "    y_test.go:3: fine\n"),
			out(pkgA, "TestY/ok", "    --- PASS: TestY/ok (0.00s)\n"),
			end("pass", pkgA, "TestY/ok", 0),
			out(pkgA, "TestY/bad", "=== RUN   TestY/bad\n"),
			out(pkgA, "TestY/bad", "    y_test.go:7: Parse(\"x\") = 1, want 2\n"),
			out(pkgA, "TestY/bad", "    --- FAIL: TestY/bad (0.00s)\n"),
			end("fail", pkgA, "TestY/bad", 0),
			out(pkgA, "TestY", "--- FAIL: TestY (0.01s)\n"),
			end("fail", pkgA, "TestY", 0.01),
			out(pkgA, "", "FAIL\n"),
			out(pkgA, "", "FAIL\tgithub.com/jsdlq/jsdlq/shared/a\t0.1s\n"),
			end("fail", pkgA, "", 0.1)),
		want: "    y_test.go:7: Parse(\"x\") = 1, want 2\n    --- FAIL: TestY/bad (0.00s)\n--- FAIL: TestY (0.01s)\n" +
			"FAIL\nFAIL\tgithub.com/jsdlq/jsdlq/shared/a\t0.1s\n",
		summary: Summary{Passed: 1, Failed: 2, Tests: []timing{{pkgA, "TestY", 0.01}},
			Packages:    []timing{{Package: pkgA, Seconds: 0.1}},
			FailedTests: []string{"shared/a TestY/bad", "shared/a TestY"}, FailedPackages: []string{"shared/a"}},
	}, {
		name: "a test the binary died under prints what it wrote before the package's FAIL",
		in: stream(t,
			out(pkgB, "TestZ", "=== RUN   TestZ\n"),
			out(pkgB, "TestZ", "panic: test timed out after 14m0s\n"),
			out(pkgB, "", "FAIL\tgithub.com/jsdlq/jsdlq/shared/b\t840.0s\n"),
			end("fail", pkgB, "", 840)),
		want: "panic: test timed out after 14m0s\nFAIL\tgithub.com/jsdlq/jsdlq/shared/b\t840.0s\n",
		summary: Summary{Packages: []timing{{Package: pkgB, Seconds: 840}},
			FailedPackages: []string{"shared/b"}},
	}, {
		name: "skipped tests are counted and quiet; build errors and foreign lines pass through",
		in: "stackctl: firestore emulator on 127.0.0.1:4000\n" + stream(t,
			testEvent{Action: "build-output", ImportPath: pkgB + " [" + pkgB + ".test]", Output: "# " + pkgB + "\n"},
			testEvent{Action: "build-output", ImportPath: pkgB + " [" + pkgB + ".test]", Output: "b.go:3:1: syntax error\n"},
			testEvent{Action: "build-fail", ImportPath: pkgB + " [" + pkgB + ".test]"},
			out(pkgA, "TestS", "--- SKIP: TestS (0.00s)\n"),
			out(pkgA, "TestS", "    s_test.go:5: needs chromium\n"),
			end("skip", pkgA, "TestS", 0),
			out(pkgA, "", "?   \tgithub.com/jsdlq/jsdlq/shared/a\t[no test files]\n"),
			end("skip", pkgA, "", 0)),
		want: "stackctl: firestore emulator on 127.0.0.1:4000\n# " + pkgB + "\nb.go:3:1: syntax error\n" +
			"?   \tgithub.com/jsdlq/jsdlq/shared/a\t[no test files]\n",
		summary: Summary{Skipped: 1, Tests: []timing{{pkgA, "TestS", 0}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got bytes.Buffer
			sum, err := Report(strings.NewReader(tt.in), &got)
			if err != nil {
				t.Fatalf("Report() error = %v", err)
			}
			if got.String() != tt.want {
				t.Errorf("Report() printed:\n%s\nwant:\n%s", got.String(), tt.want)
			}
			if diff := cmp.Diff(tt.summary, sum, cmp.AllowUnexported(timing{})); diff != "" {
				t.Errorf("Report() summary (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteSlowest(t *testing.T) {
	s := Summary{Passed: 5, Failed: 1, Skipped: 2,
		Tests: []timing{{pkgA, "TestFast", 0.2}, {pkgB, "TestSlow", 30}, {pkgA, "TestMiddle", 4}},
		Packages: []timing{{Package: pkgA, Seconds: 5}, {Package: pkgB, Seconds: 31},
			{Package: "github.com/jsdlq/jsdlq", Seconds: 0.1}},
		FailedTests: []string{"shared/b TestSlow"}}
	var got strings.Builder
	s.WriteSlowest(&got, 2)
	want := `
2 slowest tests:
     30.0s  shared/b                     TestSlow
      4.0s  shared/a                     TestMiddle
2 slowest packages:
     31.0s  shared/b
      5.0s  shared/a
tests (subtests and fuzz seeds included): 5 passed, 1 failed, 2 skipped; 3 packages
FAILED: shared/b TestSlow
`
	if diff := cmp.Diff(want, got.String()); diff != "" {
		t.Errorf("WriteSlowest(2) (-want +got):\n%s", diff)
	}
}
