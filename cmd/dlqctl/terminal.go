package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/event"
)

// This file is dlqctl's terminal encoder: everything dlqctl prints is
// formatted through outf and termf, which write every string argument (a
// tenant, a reason, a header, a history note: values from the wire) through
// event.Terminal, so no value can move the cursor, reverse the text or
// start a line of its own; the format itself is dlqctl's. JSON output is
// escaped the same way (writeJSON).

// termf is fmt.Sprintf with its string arguments (strings, fmt.Stringers,
// string slices, errors) escaped by event.Terminal, but for those printed
// with %q, which Go's quoting escapes already.
func termf(format string, args ...any) string {
	quoted := quotedArgs(format)
	esc := make([]any, len(args))
	for i, a := range args {
		if quoted[i] {
			esc[i] = a
			continue
		}
		esc[i] = terminalArg(a)
	}
	return fmt.Sprintf(format, esc...)
}

func terminalArg(a any) any {
	switch v := a.(type) {
	case error:
		return event.Terminal(v.Error())
	case fmt.Stringer:
		return event.Terminal(v.String())
	}
	// Strings and the types made of them (store.Status, a []string), by
	// kind: a named string type is no Stringer.
	switch v := reflect.ValueOf(a); {
	case v.Kind() == reflect.String:
		return event.Terminal(v.String())
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		out := make([]string, v.Len())
		for i := range out {
			out[i] = event.Terminal(v.Index(i).String())
		}
		return out
	}
	return a
}

// quotedArgs reports, per argument index, whether format prints it with
// %q (explicit argument indexes are not used by dlqctl's formats).
func quotedArgs(format string) map[int]bool {
	out := map[int]bool{}
	arg := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0123456789.*", format[i]) >= 0 {
			if format[i] == '*' {
				arg++ // a width or precision argument
			}
			i++
		}
		if i >= len(format) || format[i] == '%' {
			continue
		}
		if format[i] == 'q' {
			out[arg] = true
		}
		arg++
	}
	return out
}

// outf writes termf(format, args...) to w.
func outf(w io.Writer, format string, args ...any) {
	io.WriteString(w, termf(format, args...))
}

// writeJSON writes v as indented JSON with every rune a terminal would not
// show as itself escaped as \uXXXX: the encoder escapes control
// characters already, not format characters such as a bidirectional
// override, and JSON output is read on terminals too.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	var out strings.Builder
	out.Grow(len(b) + 1)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == '\n' || event.Visible(r):
			out.Write(b[:size])
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
		b = b[size:]
	}
	out.WriteByte('\n')
	_, err = io.WriteString(w, out.String())
	return err
}

// writeHeaders prints headers one value a line, indented, names sorted,
// as the message carried them (the store keeps them event-encoded) and
// escaped for the terminal.
func writeHeaders(w io.Writer, h map[string][]string) {
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			outf(w, "  %s: %s\n", decodedHeader(k), decodedHeader(v))
		}
	}
}

// decodedHeader is a stored header name or value as sent.
func decodedHeader(s string) string {
	if d, err := event.DecodeHeader(s); err == nil {
		return d
	}
	return s
}
