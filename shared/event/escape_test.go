package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/event"
)

// hostile are identifiers a stream, a header or a forged request can carry.
var hostile = []string{
	"../entries/x/discard?", "..%2F", "%2F", "%", "%zz", "?", "#", "/x", "a/", "a/b", "a//b", "x/../y",
	"\x00", "\x1b[2J", "a\nb", "a\r\nHTTP/1.1 200", "\u202eRTL", "\u2066iso", "\xff\xfe", "\\", "\\x41",
	"WORK~EU.5", "Zürich", "a:replay", "a;b=c", "+&=$@!*'(),", strings.Repeat("x", 1600), strings.Repeat("é", 5000),
}

func TestURLPath(t *testing.T) {
	for _, tc := range []struct {
		segs []string
		want string
	}{
		{[]string{"entries", "TASKS.5"}, "/entries/TASKS.5"},
		{[]string{"entries", "WORK%7EEU.5", "approve"}, "/entries/WORK%257EEU.5/approve"},
		{[]string{"tenants", "../entries/x/discard?", "close"}, "/tenants/..%2Fentries%2Fx%2Fdiscard%3F/close"},
		{[]string{"tenants", "a#b c", "probe"}, "/tenants/a%23b%20c/probe"},
		{[]string{"tenants", "(invalid)"}, "/tenants/%28invalid%29"},
		{[]string{"t", "\xff\u202e"}, "/t/%FF%E2%80%AE"},
	} {
		got, err := event.URLPath(tc.segs...)
		if err != nil || got != tc.want {
			t.Errorf("URLPath(%q) = %q, %v, want %q", tc.segs, got, err, tc.want)
		}
	}
	for _, seg := range []string{"", ".", "..", "/"} {
		if got, err := event.URLPath("tenants", seg, "close"); !errors.Is(err, event.ErrBadName) {
			t.Errorf("URLPath(tenants, %q, close) = %q, %v, want ErrBadName", seg, got, err)
		}
	}
}

// routed serves the path URLPath built and reports the segment the
// router gives the handler: what a link or a form action resolves to.
func routed(t testing.TB, seg string) (got string, ok bool) {
	t.Helper()
	path, err := event.URLPath("tenants", seg, "close")
	if err != nil {
		t.Fatalf("URLPath(%q) = %v", seg, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tenants/{tenant}/close", func(w http.ResponseWriter, r *http.Request) {
		got, ok = r.PathValue("tenant"), true
	})
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, path, nil))
	return got, ok
}

func TestURLPathRoundTripsThroughTheRouter(t *testing.T) {
	for _, seg := range hostile {
		if got, ok := routed(t, seg); !ok || got != seg {
			t.Errorf("POST URLPath(tenants, %q, close) reached the handler: %v with %q, want the same segment", seg, ok, got)
		}
	}
}

func FuzzURLPath(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		path, err := event.URLPath("tenants", seg, "close")
		if seg == "" || seg == "." || seg == ".." || seg == "/" {
			if err == nil {
				t.Fatalf("URLPath(%q) = %q, want an error", seg, path)
			}
			return
		}
		if err != nil {
			t.Fatalf("URLPath(%q) = %v", seg, err)
		}
		if strings.Count(path, "/") != 3 || strings.ContainsAny(path, "?#") {
			t.Fatalf("URLPath(%q) = %q: the segment added structure", seg, path)
		}
		if got, ok := routed(t, seg); !ok || got != seg {
			t.Fatalf("URLPath(%q) = %q reached the handler %v with %q", seg, path, ok, got)
		}
	})
}

func TestTerminal(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"acme", "acme"},
		{"Zürich 北京", "Zürich 北京"},
		{"a\nb", `a\nb`},
		{"a\tb\r", `a\tb\r`},
		{"\x1b[31m", `\x1b[31m`},
		{"\x7f", `\x7f`},
		{"a\u0085b", `a\u0085b`},
		{"abc\u202edcba", `abc\u202edcba`},
		{"\u2066x\u2069", `\u2066x\u2069`},
		{"\U000e0041", `\U000e0041`}, // a tag character
		{"a\xffb", `a\xffb`},
		{`a\nb`, `a\\nb`}, // a backslash of its own cannot pass for an escape
	} {
		if got := event.Terminal(tc.in); got != tc.want {
			t.Errorf("Terminal(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// unTerminal reverses Terminal: the test of its injectivity.
func unTerminal(t testing.TB, s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'x':
			n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				t.Fatalf("unTerminal(%q): %v", s, err)
			}
			b.WriteByte(byte(n))
			i += 2
		case 'u', 'U':
			w := 4
			if s[i] == 'U' {
				w = 8
			}
			n, err := strconv.ParseUint(s[i+1:i+1+w], 16, 32)
			if err != nil {
				t.Fatalf("unTerminal(%q): %v", s, err)
			}
			b.WriteRune(rune(n))
			i += w
		default:
			t.Fatalf("unTerminal(%q): unknown escape at %d", s, i)
		}
	}
	return b.String()
}

func FuzzTerminal(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := event.Terminal(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Terminal(%q) = %q is not UTF-8", s, out)
		}
		for _, r := range out {
			if !event.Visible(r) {
				t.Fatalf("Terminal(%q) = %q holds the invisible %U", s, out, r)
			}
		}
		if back := unTerminal(t, out); back != s {
			t.Fatalf("Terminal(%q) = %q reads back as %q", s, out, back)
		}
	})
}

// logged is what a JSON log line carries for v under key "v".
func logged(t testing.TB, v any) string {
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "v", v)
	var line struct{ V string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q: %v", buf.Bytes(), err)
	}
	return line.V
}

func TestWireLogValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"TASKS.5", "TASKS.5"},
		{"A\u202eB.5", `A\u202eB.5`},
		{"x\n{\"forged\":1}", `x\n{"forged":1}`},
		{strings.Repeat("a", 600), strings.Repeat("a", event.MaxLogBytes) + "… (600 bytes)"},
	} {
		if got := logged(t, event.Wire(tc.in)); got != tc.want {
			t.Errorf("log of Wire(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := event.Wire("a\u202eb").String(); got != `a\u202eb` {
		t.Errorf("Wire.String() = %q, want Terminal's", got)
	}
}

func FuzzWireLogValue(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := logged(t, event.Wire(s))
		for _, r := range got {
			if !event.Visible(r) {
				t.Fatalf("log of Wire(%q) = %q holds the invisible %U", s, got, r)
			}
		}
		if len(got) > 4*event.MaxLogBytes+64 {
			t.Fatalf("log of Wire(%d bytes) has %d bytes, want it bounded", len(s), len(got))
		}
		if len(s) <= event.MaxLogBytes && unTerminal(t, got) != s {
			t.Fatalf("log of Wire(%q) = %q loses the value", s, got)
		}
	})
}
