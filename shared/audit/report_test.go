package audit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A finding or a repair lists its first MaxExamples cases and counts all.
func TestReportKeepsFirstExamples(t *testing.T) {
	for _, n := range []int{0, 1, MaxExamples, MaxExamples + 3} {
		var f Finding
		var r Repair
		var want []string
		for i := range n {
			id := fmt.Sprintf("TASKS.%d", i)
			f.Example(id)
			r.Fail(errors.New(id))
			r.Note(id)
			if i < MaxExamples {
				want = append(want, id)
			}
		}
		if f.Count != n || r.Failed != n {
			t.Errorf("%d cases: Finding.Count = %d, Repair.Failed = %d, want %d", n, f.Count, r.Failed, n)
		}
		for name, got := range map[string][]string{"Examples": f.Examples, "Errors": r.Errors, "Notes": r.Notes} {
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%d cases: %s (-want +got):\n%s", n, name, d)
			}
		}
	}
}
