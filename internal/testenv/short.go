package testenv

import "testing"

// SkipShort skips the test under `go test -short` (`make test-short`): the
// unit tests alone, without what needs is (an emulator, a browser, npm,
// terraform, a build of a binary). The helpers that start such things call it
// themselves, so a test skips where it first asks for one.
func SkipShort(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: needs %s", needs)
	}
}
