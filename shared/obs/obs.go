// Package obs builds the structured loggers every jsdlq component uses: log/slog
// JSON whose keys Cloud Logging understands (severity, message, timestamp,
// logging.googleapis.com/trace), so entries are filterable and correlated with
// the request trace without an agent rewriting them.
package obs

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/event"
)

// Cloud Logging's special JSON keys.
const (
	KeySeverity  = "severity"
	KeyMessage   = "message"
	KeyTimestamp = "timestamp"
	KeyTrace     = "logging.googleapis.com/trace"
	KeySpanID    = "logging.googleapis.com/spanId"
)

// LevelNotice and LevelCritical extend slog's levels with the Cloud Logging
// severities between and beyond slog's four.
const (
	LevelNotice   = slog.Level(2)
	LevelCritical = slog.Level(12)
)

// Severity maps a slog level to the Cloud Logging severity name. Cloud Logging
// spells slog's WARN as WARNING; anything else unknown would be shown as DEFAULT.
func Severity(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "DEBUG"
	case l < LevelNotice:
		return "INFO"
	case l < slog.LevelWarn:
		return "NOTICE"
	case l < slog.LevelError:
		return "WARNING"
	case l < LevelCritical:
		return "ERROR"
	default:
		return "CRITICAL"
	}
}

// Option configures NewLogger.
type Option func(*options)

type options struct {
	level     slog.Leveler
	projectID string
	component string
}

// WithLevel sets the minimum level logged (default Info).
func WithLevel(l slog.Leveler) Option { return func(o *options) { o.level = l } }

// WithProject sets the project used to expand trace ids into the
// "projects/P/traces/T" form Cloud Logging correlates on.
func WithProject(projectID string) Option { return func(o *options) { o.projectID = projectID } }

// WithComponent adds a "component" attribute to every entry.
func WithComponent(name string) Option { return func(o *options) { o.component = name } }

// NewLogger returns a JSON logger writing Cloud Logging entries to w. Trace ids
// put into the context with ContextWithTrace are added to every entry logged
// with that context.
func NewLogger(w io.Writer, opts ...Option) *slog.Logger {
	o := options{level: slog.LevelInfo}
	for _, opt := range opts {
		opt(&o)
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level:     o.level,
		AddSource: false,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			a.Value = visibleValue(a.Value)
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.LevelKey:
				lvl, _ := a.Value.Any().(slog.Level)
				return slog.String(KeySeverity, Severity(lvl))
			case slog.MessageKey:
				a.Key = KeyMessage
			case slog.TimeKey:
				a.Key = KeyTimestamp
				if t, ok := a.Value.Any().(time.Time); ok {
					a.Value = slog.StringValue(t.UTC().Format(time.RFC3339Nano))
				}
			}
			return a
		},
	})
	var handler slog.Handler = &traceHandler{Handler: h, projectID: o.projectID}
	l := slog.New(handler)
	if o.component != "" {
		l = l.With("component", o.component)
	}
	return l
}

// visibleValue is v with a string or error that a reader of the log would
// not see as written (a bidirectional override, a zero-width or other
// invisible rune, bytes that are not UTF-8; JSON escapes the control
// characters but shows these as they act) escaped as a terminal shows it
// (event.Terminal). This is the log's encoder for every value, so a wire
// value that reaches a log line without event.Wire (a stream name in a
// NATS error, a subject, a tenant read before the naming rule existed)
// still cannot reverse or hide the text around it. Visible text, a
// backslash included, is unchanged, so a value event.Wire already escaped
// is written once, as it was.
func visibleValue(v slog.Value) slog.Value {
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); !visibleText(s) {
			return slog.StringValue(event.Terminal(s))
		}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			if s := err.Error(); !visibleText(s) {
				return slog.StringValue(event.Terminal(s))
			}
		}
	}
	return v
}

// visibleText reports whether every rune of s is visible (a backslash too).
func visibleText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r != '\\' && !event.Visible(r) {
			return false
		}
	}
	return true
}

type traceKey struct{}

type traceInfo struct{ traceID, spanID string }

// ContextWithTrace returns ctx carrying the trace of an incoming request, read
// from X-Cloud-Trace-Context ("TRACE_ID/SPAN_ID;o=1") or, failing that, from
// W3C traceparent ("00-TRACE_ID-SPAN_ID-01").
func ContextWithTrace(ctx context.Context, h http.Header) context.Context {
	traceID, spanID := TraceFromHeader(h)
	if traceID == "" {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, traceInfo{traceID: traceID, spanID: spanID})
}

// TraceFromHeader extracts the trace and span ids of a request; both are
// empty when the request carries no (valid) trace header.
func TraceFromHeader(h http.Header) (traceID, spanID string) {
	if v := h.Get("X-Cloud-Trace-Context"); v != "" {
		id, rest, _ := strings.Cut(v, "/")
		span, _, _ := strings.Cut(rest, ";")
		if isHex(id, 32) {
			return strings.ToLower(id), span
		}
	}
	if v := h.Get("Traceparent"); v != "" {
		parts := strings.Split(v, "-")
		if len(parts) == 4 && isHex(parts[1], 32) && isHex(parts[2], 16) && strings.Trim(parts[1], "0") != "" {
			return strings.ToLower(parts[1]), strings.ToLower(parts[2])
		}
	}
	return "", ""
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// Middleware puts the request's trace into its context so handlers that log
// with r.Context() get correlated entries.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(ContextWithTrace(r.Context(), r.Header)))
	})
}

type traceHandler struct {
	slog.Handler
	projectID string
}

func (h *traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if t, ok := ctx.Value(traceKey{}).(traceInfo); ok {
		trace := t.traceID
		if h.projectID != "" {
			trace = "projects/" + h.projectID + "/traces/" + t.traceID
		}
		r.AddAttrs(slog.String(KeyTrace, trace))
		if t.spanID != "" {
			r.AddAttrs(slog.String(KeySpanID, t.spanID))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &traceHandler{Handler: h.Handler.WithAttrs(attrs), projectID: h.projectID}
}

func (h *traceHandler) WithGroup(name string) slog.Handler {
	return &traceHandler{Handler: h.Handler.WithGroup(name), projectID: h.projectID}
}

// Secret is a string that never appears in logs.
type Secret string

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Discard returns a logger that drops everything; for tests that do not look
// at logs.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
