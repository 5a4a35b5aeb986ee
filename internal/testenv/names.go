package testenv

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/event"
)

// HostileName is an identifier a message header, a stream or a forged
// request can carry (the corpus of docs/contracts.md, "Names"): the tests
// of every surface (capture, classify, the console's links and forms, the
// tenant API, document ids, dlqctl, logs) drive the same values.
type HostileName struct {
	Name  string // for test names
	Value string
	// Valid is whether the naming rule accepts it as a tenant, agent or
	// task type (event.ParseTenant); an invalid one is recorded under the
	// reserved tenant.
	Valid bool
	// Header is whether a NATS header can carry it (no line break): the
	// others reach classify only in an event, as a forged or future
	// bridge could send it.
	Header bool
}

// HostileNames is the corpus of tenant, agent and task type names.
func HostileNames() []HostileName {
	return []HostileName{
		{"path-shaped", "../entries/TASKS.1/discard?", true, true},
		{"dot-dot", "..", false, true},
		{"slash", "/", false, true},
		{"escaped-slash", "%2F", true, true},
		{"question-mark", "?", true, true},
		{"hash", "#", true, true},
		{"slashes", "org/team//x", true, true},
		{"unicode", "Zürich 北京", true, true},
		{"escape-sequence", "acme\x1b[2J", false, true},
		{"line-break", "acme\nX-Forged: 1", false, false},
		{"rtl-override", "acme\u202egnp.exe", false, true},
		{"not-utf8", "acme\xff\xfe", false, true},
		{"reserved", "(invalid)", false, true},
		{"1600-bytes", strings.Repeat("t", 1600), false, true},
		{"10000-bytes", strings.Repeat("é", 5000), false, true},
	}
}

// HostileStreams are stream names JetStream accepts that need encoding in
// an entry id, a URL, a terminal or a log.
func HostileStreams() []string {
	return []string{"WORK~EU", "A#B?C%2F", "WORK\u202eUE", "WORK\x1bX", "Zürich"}
}

// CheckVisible fails the test when out (a terminal's output, a log value)
// holds a rune a terminal would act on or not show as itself, a line
// break aside, or bytes that are not UTF-8: what the terminal and log
// encoders promise.
func CheckVisible(t testing.TB, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not UTF-8: %.300q", what, out)
		return
	}
	for _, r := range out {
		if r != '\n' && !event.Visible(r) {
			t.Errorf("%s: output holds %U: %.300q", what, r, out)
			return
		}
	}
}
