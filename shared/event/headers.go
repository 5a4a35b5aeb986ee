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

// Conventions names the message headers jsdlq reads (SPEC §5).
type Conventions struct {
	TenantHeader  string // default X-Tenant-ID
	AgentHeader   string // default X-Agent
	DefaultTenant string // default "default"
	// AgentSubjectPrefix: the agent is the token after it in subjects
	// "<prefix>.<agent>.tasks.<type>"; default "agents".
	AgentSubjectPrefix string
}

// DefaultConventions are the header names of SPEC §5.
var DefaultConventions = Conventions{
	TenantHeader:       "X-Tenant-ID",
	AgentHeader:        "X-Agent",
	DefaultTenant:      DefaultTenant,
	AgentSubjectPrefix: "agents",
}

// Tenant returns the tenant of a message with decoded headers h.
func (c Conventions) Tenant(h map[string][]string) string {
	if t := strings.TrimSpace(Header(h, c.TenantHeader)); t != "" {
		return t
	}
	if c.DefaultTenant == "" {
		return DefaultTenant
	}
	return c.DefaultTenant
}

// Agent returns the agent of a message: the agent header, else the <agent>
// token of a subject "agents.<agent>.tasks.<type>", else "".
func (c Conventions) Agent(subject string, h map[string][]string) string {
	if a := strings.TrimSpace(Header(h, c.AgentHeader)); a != "" {
		return a
	}
	tokens := strings.Split(subject, ".")
	if len(tokens) >= 3 && tokens[0] == c.AgentSubjectPrefix && tokens[2] == "tasks" && tokens[1] != "" {
		return tokens[1]
	}
	return ""
}
