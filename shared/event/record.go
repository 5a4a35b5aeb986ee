package event

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The explicit DLQ record (agentkit.Terminate; docs/contracts.md) is a NATS
// message on RecordSubject(stream) whose body is the original payload byte for
// byte and whose headers are the original headers plus one RecordHeader
// holding the record's metadata as JSON. Keeping the payload out of JSON means
// a record is only a few hundred bytes larger than the original, so any
// message the server accepted can be copied.
//
// Original header names beginning with "Nats-" would be interpreted by the
// server when the record is published (Nats-Msg-Id, Nats-Expected-*), and
// names beginning with RecordHeader or OrigPrefix would collide with ours:
// such names travel as OrigPrefix + name and ParseRecord strips the prefix.
const (
	RecordSchema        = "jsdlq.record.v1"
	RecordHeader        = "Jsdlq-Record"
	OrigPrefix          = "Jsdlq-Orig-"
	RecordSubjectPrefix = "dlq.records"
	natsMsgID           = "Nats-Msg-Id"
)

// RecordSubject is the subject agentkit publishes the record of a message of
// stream to.
func RecordSubject(stream string) string { return RecordSubjectPrefix + "." + stream }

// RecordMeta is the metadata of a record.
type RecordMeta struct {
	Schema      string    `json:"schema"`
	Stream      string    `json:"stream"`
	StreamSeq   uint64    `json:"stream_seq"`
	Consumer    string    `json:"consumer,omitempty"`
	Subject     string    `json:"subject"`
	PublishedAt time.Time `json:"published_at"`
	Deliveries  uint64    `json:"deliveries,omitempty"`
	Failure     Failure   `json:"failure"`
}

// Record is a copy of a message made before it was terminated.
type Record struct {
	Meta    RecordMeta
	Headers map[string][]string // original headers, raw bytes
	Data    []byte
}

func mustEscape(name string) bool {
	l := strings.ToLower(name)
	return strings.HasPrefix(l, "nats-") || strings.HasPrefix(l, strings.ToLower(RecordHeader)) ||
		strings.HasPrefix(l, strings.ToLower(OrigPrefix))
}

// Encode returns the headers and body of the record message. The headers
// include Nats-Msg-Id = ID(stream, seq) so that JetStream deduplicates a
// record published twice for the same message.
func (r Record) Encode() (map[string][]string, []byte, error) {
	m := r.Meta
	m.Schema = RecordSchema
	if m.Stream == "" || m.StreamSeq == 0 || m.Subject == "" || m.Failure.Code == "" {
		return nil, nil, fmt.Errorf("%w: record needs stream, stream_seq, subject and failure.code", ErrInvalid)
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("event: encode record %s: %w", ID(m.Stream, m.StreamSeq), err)
	}
	h := make(map[string][]string, len(r.Headers)+2)
	for name, values := range r.Headers {
		if mustEscape(name) {
			name = OrigPrefix + name
		}
		h[name] = append([]string(nil), values...)
	}
	h[RecordHeader] = []string{string(meta)}
	h[natsMsgID] = []string{ID(m.Stream, m.StreamSeq)}
	return h, r.Data, nil
}

// ParseRecord reads a record message. Errors wrap ErrInvalid.
func ParseRecord(headers map[string][]string, data []byte) (Record, error) {
	raw := Header(headers, RecordHeader)
	if raw == "" {
		return Record{}, fmt.Errorf("%w: record has no %s header", ErrInvalid, RecordHeader)
	}
	var m RecordMeta
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return Record{}, fmt.Errorf("%w: record metadata: %v", ErrInvalid, err)
	}
	switch {
	case m.Schema != RecordSchema:
		return Record{}, fmt.Errorf("%w: unknown record schema %q (want %q)", ErrInvalid, m.Schema, RecordSchema)
	case m.Stream == "" || m.StreamSeq == 0 || strings.ContainsAny(m.Stream, ". *>"):
		return Record{}, fmt.Errorf("%w: record has no valid stream and stream_seq", ErrInvalid)
	case m.Subject == "":
		return Record{}, fmt.Errorf("%w: record %s has no subject", ErrInvalid, ID(m.Stream, m.StreamSeq))
	case m.Failure.Code == "":
		return Record{}, fmt.Errorf("%w: record %s has no failure code", ErrInvalid, ID(m.Stream, m.StreamSeq))
	}
	orig := make(map[string][]string, len(headers))
	for name, values := range headers {
		switch {
		case strings.EqualFold(name, RecordHeader):
		case len(name) > len(OrigPrefix) && strings.EqualFold(name[:len(OrigPrefix)], OrigPrefix):
			orig[name[len(OrigPrefix):]] = values
		case strings.HasPrefix(strings.ToLower(name), "nats-"):
			// Added by the record publish or by JetStream, not by the original.
		default:
			orig[name] = values
		}
	}
	if len(orig) == 0 {
		orig = nil
	}
	return Record{Meta: m, Headers: orig, Data: data}, nil
}

// Event builds the explicit event of a record.
func (r Record) Event(c Conventions, observedAt time.Time) Event {
	m := r.Meta
	f := m.Failure
	n := c.Names(m.Subject, r.Headers, f.Agent)
	e := Event{
		Schema:     Schema,
		ID:         ID(m.Stream, m.StreamSeq),
		Kind:       KindExplicit,
		Stream:     m.Stream,
		StreamSeq:  m.StreamSeq,
		Consumer:   m.Consumer,
		Tenant:     n.Tenant,
		Agent:      n.Agent,
		Failure:    &f,
		ObservedAt: observedAt.UTC(),
	}
	e.Message.Subject = m.Subject
	e.Message.Headers = EncodeHeaders(r.Headers)
	if !m.PublishedAt.IsZero() {
		t := m.PublishedAt.UTC()
		e.Message.PublishedAt = &t
	}
	e.Message.SetPayload(r.Data)
	return e
}
