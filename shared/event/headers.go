package event

import (
	"encoding/base64"
	"errors"
	"strings"
	"unicode/utf8"
)

// EncodedPrefix marks a header name or value carried as base64. NATS headers
// are bytes, JSON strings are UTF-8: a value that is not valid UTF-8 would be
// silently mangled into U+FFFD by any JSON encoder. Such values become
// EncodedPrefix + base64(std, raw bytes). A value that happens to begin with
// EncodedPrefix is encoded the same way, so decoding is never ambiguous.
const EncodedPrefix = "jsdlq-b64:"

// EncodeHeader returns s as it appears in an event.
func EncodeHeader(s string) string {
	if utf8.ValidString(s) && !strings.HasPrefix(s, EncodedPrefix) {
		return s
	}
	return EncodedPrefix + base64.StdEncoding.EncodeToString([]byte(s))
}

// DecodeHeader reverses EncodeHeader.
func DecodeHeader(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, EncodedPrefix)
	if !ok {
		return s, nil
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return "", errors.New("malformed " + EncodedPrefix + " value")
	}
	return string(b), nil
}

func checkEncoded(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not UTF-8")
	}
	_, err := DecodeHeader(s)
	return err
}

// EncodeHeaders converts NATS headers (name → values, raw bytes) for an event.
// It returns nil for no headers.
func EncodeHeaders(h map[string][]string) map[string][]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string][]string, len(h))
	for name, values := range h {
		enc := make([]string, len(values))
		for i, v := range values {
			enc[i] = EncodeHeader(v)
		}
		out[EncodeHeader(name)] = enc
	}
	return out
}

// DecodeHeaders reverses EncodeHeaders: it returns the original bytes.
func DecodeHeaders(h map[string][]string) (map[string][]string, error) {
	if len(h) == 0 {
		return nil, nil
	}
	out := make(map[string][]string, len(h))
	for name, values := range h {
		n, err := DecodeHeader(name)
		if err != nil {
			return nil, err
		}
		dec := make([]string, len(values))
		for i, v := range values {
			if dec[i], err = DecodeHeader(v); err != nil {
				return nil, err
			}
		}
		out[n] = dec
	}
	return out, nil
}

// Header returns the first value of name in decoded headers h, matching the
// name case-insensitively as NATS clients set them in varying case.
func Header(h map[string][]string, name string) string {
	if v, ok := h[name]; ok && len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// directGetHeaders are the headers JetStream adds to a message read with a
// direct get; they are not the publisher's.
var directGetHeaders = []string{"Nats-Stream", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Subject",
	"Nats-Last-Sequence", "Nats-Num-Pending", "Nats-UpTo-Sequence"}

// DropDirectGetHeaders removes from h (a message read with a direct get)
// the headers the get added, so what is kept is what the publisher sent. It
// returns h, nil when nothing is left: a message published without headers
// reads back without any.
func DropDirectGetHeaders(h map[string][]string) map[string][]string {
	for _, name := range directGetHeaders {
		for k := range h {
			if strings.EqualFold(k, name) {
				delete(h, k)
			}
		}
	}
	if len(h) == 0 {
		return nil
	}
	return h
}
