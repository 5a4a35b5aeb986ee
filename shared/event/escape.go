package event

import (
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"
)

// This file holds the encoders of values from the wire, one per
// destination (docs/contracts.md, "Names"): a URL path (URLPath), a
// terminal (Terminal) and a log field (Wire). A value from the wire is
// data: written through its encoder it can never become the structure
// around it (another path, another line, reversed text). Document ids are
// the store's encoding (store.EntryID).

// URLPath is the absolute URL path of segments, each percent-encoded
// whole: every byte but ASCII letters, digits, '-', '.', '_' and '~' is
// written %XX, so no segment can add a '/', a query, a fragment or an
// escape of its own, and net/http's PathValue gives each back byte for
// byte. A segment that is empty, ".", ".." or "/" is refused: clients
// resolve the dot segments away (their escapes included), and net/http's
// router takes an escaped "/" alone for a trailing slash, so no encoding of
// them survives the trip.
func URLPath(segments ...string) (string, error) {
	var b strings.Builder
	for _, s := range segments {
		if !pathSegment(s) {
			return "", fmt.Errorf("%w: %q cannot be a URL path segment", ErrBadName, s)
		}
		b.WriteByte('/')
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
				b.WriteByte(c)
				continue
			}
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String(), nil
}

// Terminal is s as a terminal shows it safely, on one line: every rune
// that is not Visible is escaped visibly (\n, \t, \r, \xNN for other
// control bytes and DEL, \u202e for a format character such as a
// bidirectional override, \uNNNN or \UNNNNNNNN for other invisible runes),
// every byte that is not UTF-8 as \xNN, and '\' as \\, so the escaping is
// unambiguous. Visible text is unchanged.
func Terminal(s string) string {
	if isPlain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case Visible(r):
			b.WriteString(s[i : i+size])
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// isPlain reports whether Terminal leaves s as it is.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			return plainRunes(s)
		}
	}
	return true
}

func plainRunes(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == '\\' || !Visible(r) {
			return false
		}
	}
	return true
}

// MaxLogBytes bounds a wire value in a log line: the rest is counted, not
// written.
const MaxLogBytes = 512

// Wire is a value read from the wire (a tenant or agent as a message
// carried it, an event id, a subject, a header). Logged it is escaped as
// Terminal escapes it and cut to MaxLogBytes; printed (%s, %v) it is
// Terminal's. Log a wire value as Wire(v), never as a bare string.
type Wire string

// String is the value as a terminal shows it.
func (w Wire) String() string { return Terminal(string(w)) }

// LogValue is the value as a log line carries it.
func (w Wire) LogValue() slog.Value {
	s := string(w)
	if len(s) <= MaxLogBytes {
		return slog.StringValue(Terminal(s))
	}
	cut := MaxLogBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return slog.StringValue(fmt.Sprintf("%s… (%d bytes)", Terminal(s[:cut]), len(s)))
}

// pathSegment reports whether URLPath can write s as one path segment.
func pathSegment(s string) bool { return s != "" && s != "." && s != ".." && s != "/" }
