// Package event is the jsdlq.event.v1 envelope (docs/contracts.md): the one
// message the bridge publishes to Pub/Sub for every dead JetStream message,
// and that classify decodes. It owns the event id derivation, the Pub/Sub
// attributes, the lossless encoding of header values JSON cannot carry, and
// the explicit DLQ record agentkit publishes to dlq.records.<stream>.
//
// Decode is strict: an event that does not satisfy every invariant below is
// refused with an error wrapping ErrInvalid, so a consumer can acknowledge
// malformed input instead of retrying it forever.
package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schema is the value of the "schema" field of every event this package
// produces and the only one Decode accepts.
const Schema = "jsdlq.event.v1"

// MaxEventBytes is the largest event (data plus attributes) the bridge
// publishes by default: Pub/Sub refuses messages over 10 MB, and the payload
// grows by 4/3 in base64. A larger event is forwarded without its payload
// (message.truncated = true, size and sha256 kept), never dropped; so no
// event anyone can hold is larger.
const MaxEventBytes = 9_500_000

// Kind says which capture path produced an event.
type Kind string

// Kinds of events.
const (
	KindMaxDeliver Kind = "max_deliver" // advisory: MaxDeliver exhausted
	KindTerminated Kind = "terminated"  // advisory: AckTerm by a consumer or the server
	KindExplicit   Kind = "explicit"    // agentkit.Terminate record
)

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool {
	return k == KindMaxDeliver || k == KindTerminated || k == KindExplicit
}

// Advisory types as nats-server sends them (jetstream_events.go).
const (
	AdvisoryMaxDeliver = "io.nats.jetstream.advisory.v1.max_deliver"
	AdvisoryTerminated = "io.nats.jetstream.advisory.v1.terminated"
)

// Missing reasons: why an event carries no payload of the original message.
const (
	MissingNotFound         = "not_found"         // deleted, or removed by TERM on a WorkQueue/Interest stream
	MissingStreamNotFound   = "stream_not_found"  // the source stream no longer exists
	MissingPermissionDenied = "permission_denied" // the bridge's credentials may not read the stream
)

// Attribute names of the Pub/Sub message, for subscription filters
// (docs/contracts.md, "The event").
const (
	AttrKind     = "kind"
	AttrStream   = "stream"
	AttrConsumer = "consumer"
	AttrTenant   = "tenant"
	AttrAgent    = "agent"
	AttrEventID  = "event_id"
)

// DefaultTenant is the tenant of messages without a tenant header.
const DefaultTenant = "default"

// ErrInvalid wraps every reason Decode or Validate refuses an event.
var ErrInvalid = errors.New("event: invalid")

// Event is one dead message. Field order follows the schema
// (docs/event.schema.json).
type Event struct {
	Schema string `json:"schema"`
	// ID is "<stream>.<stream_seq>" (see ID); the dedup key downstream.
	ID        string `json:"id"`
	Kind      Kind   `json:"kind"`
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	Consumer  string `json:"consumer,omitempty"`
	Tenant    string `json:"tenant"`
	Agent     string `json:"agent,omitempty"`
	// Advisory is absent for explicit records.
	Advisory *Advisory `json:"advisory,omitempty"`
	Message  Message   `json:"message"`
	// Failure is the agent's own account (agentkit), absent when none was recorded.
	Failure    *Failure  `json:"failure,omitempty"`
	ObservedAt time.Time `json:"observed_at"`
}

// Advisory holds the fields of a JetStream consumer advisory as received.
type Advisory struct {
	Type        string    `json:"type"`
	ID          string    `json:"id"`
	Timestamp   time.Time `json:"timestamp"`
	Stream      string    `json:"stream"`
	Consumer    string    `json:"consumer"`
	ConsumerSeq uint64    `json:"consumer_seq,omitempty"`
	StreamSeq   uint64    `json:"stream_seq"`
	Deliveries  uint64    `json:"deliveries"`
	Reason      string    `json:"reason,omitempty"`
	Domain      string    `json:"domain,omitempty"`
}

// Message is the original JetStream message.
//
// Header names and values that are not valid UTF-8 (or that begin with
// EncodedPrefix) are carried as EncodedPrefix + base64; see EncodeHeaders.
//
// Exactly one of three shapes holds:
//   - complete: Data is the payload, Size == len(Data), SHA256 its digest;
//   - truncated: the payload was omitted because the event would exceed the
//     Pub/Sub message limit; Size and SHA256 still describe it;
//   - missing: the original could not be read (MissingReason says why); no
//     Data, Size 0, no SHA256.
type Message struct {
	Subject       string              `json:"subject,omitempty"`
	Headers       map[string][]string `json:"headers,omitempty"`
	Data          []byte              `json:"data,omitempty"`
	Size          int64               `json:"size"`
	PublishedAt   *time.Time          `json:"published_at,omitempty"`
	SHA256        string              `json:"sha256,omitempty"`
	Missing       bool                `json:"missing"`
	MissingReason string              `json:"missing_reason,omitempty"`
	Truncated     bool                `json:"truncated,omitempty"`
}

// Failure is an agent's account of why a delivery failed (docs/contracts.md,
// "What an agentkit writes"): the one failure record of jsdlq. agentkit fills
// it (agents set Code, Detail, CompletedSteps, Retryable and ToolFailure; the
// kit adds Attempt, Agent and RecordedAt), the bridge carries it in events,
// the store keeps it on the entry and the triage policy reads it.
type Failure struct {
	// Code is a reason code of the triage policy (docs/policy.md).
	Code   string `json:"code" firestore:"code"`
	Detail string `json:"detail,omitempty" firestore:"detail,omitempty"`
	// Attempt is the delivery that failed (1 for the first).
	Attempt int    `json:"attempt,omitempty" firestore:"attempt,omitempty"`
	Agent   string `json:"agent,omitempty" firestore:"agent,omitempty"`
	// CompletedSteps lists the side effects the attempt already made; with
	// a tool failure they make a replay unsafe (unknown_commit_state), and
	// a replay carries them so the agent can skip them.
	CompletedSteps []string `json:"completed_steps,omitempty" firestore:"completed_steps,omitempty"`
	// Retryable, when set, is the agent's own view over the policy's:
	// false escalates a code the policy would replay, true lets a permanent
	// code be replayed once (docs/policy.md).
	Retryable *bool `json:"retryable,omitempty" firestore:"retryable,omitempty"`
	// ToolFailure says a tool call failed (rather than the model): with
	// completed steps the effects of the call are unknown.
	ToolFailure bool      `json:"tool_failure,omitempty" firestore:"tool_failure,omitempty"`
	RecordedAt  time.Time `json:"recorded_at" firestore:"recorded_at,omitempty"`
}

// ID is the event id of the message at seq in stream: "<stream>.<seq>".
// JetStream stream names cannot contain '.', so the id is unambiguous and
// identical for the advisory and the explicit record of one message.
func ID(stream string, seq uint64) string {
	return stream + "." + strconv.FormatUint(seq, 10)
}

// ParseID splits an event id into stream and sequence.
func ParseID(id string) (stream string, seq uint64, err error) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: id %q is not <stream>.<seq>", ErrInvalid, id)
	}
	seq, err = strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil || seq == 0 {
		return "", 0, fmt.Errorf("%w: id %q has no positive sequence", ErrInvalid, id)
	}
	return id[:i], seq, nil
}

// SetPayload fills the complete shape of m from data.
func (m *Message) SetPayload(data []byte) {
	sum := sha256.Sum256(data)
	m.Data = data
	m.Size = int64(len(data))
	m.SHA256 = hex.EncodeToString(sum[:])
	m.Missing, m.MissingReason, m.Truncated = false, "", false
}

// Truncate drops the payload but keeps its size and digest.
func (m *Message) Truncate() {
	if m.Missing {
		return
	}
	m.Data = nil
	m.Truncated = true
}

// SetMissing marks the original as unreadable for reason.
func (m *Message) SetMissing(reason string) {
	m.Data, m.Size, m.SHA256, m.Truncated = nil, 0, "", false
	m.Missing, m.MissingReason = true, reason
}

// Attributes returns the Pub/Sub attributes of e. Empty values are left out:
// Pub/Sub filters treat an absent attribute and an empty one alike, and some
// clients refuse empty values.
func (e Event) Attributes() map[string]string {
	a := map[string]string{
		AttrKind:    string(e.Kind),
		AttrStream:  e.Stream,
		AttrEventID: e.ID,
		AttrTenant:  e.Tenant,
	}
	if e.Consumer != "" {
		a[AttrConsumer] = e.Consumer
	}
	if e.Agent != "" {
		a[AttrAgent] = e.Agent
	}
	return a
}

// Encode validates e and returns its JSON.
func Encode(e Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("event: encode %s: %w", e.ID, err)
	}
	return b, nil
}

// Decode parses and validates an event. It refuses unknown schema versions,
// unknown fields, wrong types and every violated invariant (see Validate),
// always with an error wrapping ErrInvalid.
func Decode(b []byte) (Event, error) {
	var probe struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Event{}, fmt.Errorf("%w: not a single JSON object: %v", ErrInvalid, err)
	}
	switch {
	case probe.Schema == nil:
		return Event{}, fmt.Errorf("%w: schema is missing", ErrInvalid)
	case *probe.Schema != Schema:
		return Event{}, fmt.Errorf("%w: unknown schema %q (want %q)", ErrInvalid, *probe.Schema, Schema)
	}
	// The probe's Unmarshal has refused anything after the value already.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e Event
	if err := dec.Decode(&e); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Validate checks every invariant of an event.
func (e Event) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if e.Schema != Schema {
		bad("unknown schema %q (want %q)", e.Schema, Schema)
	}
	switch {
	case e.ID == "":
		bad("id is missing")
	case e.Stream == "" || e.StreamSeq == 0:
		bad("stream and stream_seq are required")
	case e.ID != ID(e.Stream, e.StreamSeq):
		bad("id %q does not match stream %q and stream_seq %d (want %q)", e.ID, e.Stream, e.StreamSeq, ID(e.Stream, e.StreamSeq))
	}
	if _, err := ParseStream(e.Stream); e.Stream != "" && err != nil {
		errs = append(errs, err)
	}
	if !e.Kind.Valid() {
		bad("kind %q is not one of max_deliver, terminated, explicit", e.Kind)
	}
	if e.Tenant == "" {
		bad("tenant is missing")
	}
	if e.ObservedAt.IsZero() {
		bad("observed_at is missing")
	}
	switch {
	case e.Kind == KindExplicit && e.Advisory != nil:
		bad("an explicit event carries no advisory")
	case (e.Kind == KindMaxDeliver || e.Kind == KindTerminated) && e.Advisory == nil:
		bad("a %s event needs its advisory", e.Kind)
	case e.Advisory != nil:
		a := e.Advisory
		want := map[Kind]string{KindMaxDeliver: AdvisoryMaxDeliver, KindTerminated: AdvisoryTerminated}[e.Kind]
		if a.Type != want {
			bad("advisory type %q does not match kind %s", a.Type, e.Kind)
		}
		if a.Stream != e.Stream || a.StreamSeq != e.StreamSeq {
			bad("advisory is for %s, event for %s", ID(a.Stream, a.StreamSeq), e.ID)
		}
	}
	if e.Kind == KindExplicit && e.Failure == nil {
		bad("an explicit event needs its failure")
	}
	if f := e.Failure; f != nil {
		if f.Code == "" {
			bad("failure.code is missing")
		}
		if f.Attempt < 0 {
			bad("failure.attempt %d is negative", f.Attempt)
		}
	}
	if err := e.Message.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, orUnknown(e.ID), errors.Join(errs...))
	}
	return nil
}

func orUnknown(id string) string {
	if id == "" {
		return "event without id"
	}
	return "event " + id
}

func (m Message) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("message: "+format, args...)) }
	switch {
	case m.Missing:
		if len(m.Data) > 0 || m.Size != 0 || m.SHA256 != "" || m.Truncated {
			bad("a missing message carries no data, size, sha256 or truncated flag")
		}
		if m.MissingReason == "" {
			bad("missing_reason is required when missing")
		}
	case m.Truncated:
		if len(m.Data) > 0 {
			bad("a truncated message carries no data")
		}
		if !isSHA256(m.SHA256) {
			bad("sha256 %q is not a hex SHA-256 digest", m.SHA256)
		}
		if m.Size <= 0 {
			bad("size %d of a truncated message must be positive", m.Size)
		}
	default:
		if m.MissingReason != "" {
			bad("missing_reason set on a message that is not missing")
		}
		if m.Size != int64(len(m.Data)) {
			bad("size %d does not match the %d bytes of data", m.Size, len(m.Data))
		}
		sum := sha256.Sum256(m.Data)
		if m.SHA256 != hex.EncodeToString(sum[:]) {
			bad("sha256 %q does not match the data", m.SHA256)
		}
		if m.Subject == "" {
			bad("subject is missing")
		}
	}
	for name, values := range m.Headers {
		if err := checkEncoded(name); err != nil {
			bad("header name %q: %v", name, err)
		}
		for _, v := range values {
			if err := checkEncoded(v); err != nil {
				bad("header %q value: %v", name, err)
			}
		}
	}
	return errors.Join(errs...)
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}
