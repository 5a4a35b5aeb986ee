package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the change feed's row (docs/contracts.md, "The change
// feed"): one jsdlq.change.v1 row per transition of an entry, published to
// the topic dlq-changes and written by its BigQuery subscription into the
// warehouse table. ChangeColumns is the one source of its shape: the row's
// JSON encoding, the topic's Avro schema (AvroSchema), the BigQuery table's
// schema (BigQuerySchema) and the Parquet file dlqctl export writes are all
// made from it, and a test holds the files Terraform reads equal to what it
// makes.

// ChangeSchema names the row's schema (the Avro record's name).
const ChangeSchema = "jsdlq.change.v1"

// DefaultChangesTopic is the Pub/Sub topic the feed goes to (CHANGES_TOPIC;
// Terraform's default is the same).
const DefaultChangesTopic = "dlq-changes"

// AttrChangeID is the Pub/Sub attribute naming the row (the subscriber's,
// and the warehouse's, deduplication key), besides kind and tenant.
const AttrChangeID = "change_id"

// Transitions a row records (the column "transition"): what the move was,
// read from its statuses and who made it (ChangeTransition).
const (
	ChangeCreated     = "created"     // the entry was recorded
	ChangeDecided     = "decided"     // a move that hands the entry to a human (escalated, awaiting approval)
	ChangeApproved    = "approved"    // an approval scheduled its replay
	ChangeScheduled   = "scheduled"   // a replay was scheduled (again)
	ChangeClaimed     = "claimed"     // the replay function took the replay on
	ChangeReplayed    = "replayed"    // the replay was published
	ChangeRecovered   = "recovered"   // the task completed
	ChangeDiscarded   = "discarded"   // given up
	ChangeQuarantined = "quarantined" // set aside
	ChangeHeld        = "held"        // the tenant's breaker holds it
)

// ChangeTransitions are every transition, in the order above. An entry's
// expiry is no transition jsdlq makes (Firestore's TTL deletes it): every
// row carries expire_at, which is how the warehouse knows it.
var ChangeTransitions = []string{ChangeCreated, ChangeDecided, ChangeApproved, ChangeScheduled, ChangeClaimed,
	ChangeReplayed, ChangeRecovered, ChangeDiscarded, ChangeQuarantined, ChangeHeld}

// ChangeTransition names the move from → to noted note: a move with no
// previous status is the creation; an approval is a move into scheduled
// whose note starts with approvalNote.
func ChangeTransition(from, to, note, approvalNote string) string {
	switch {
	case from == "":
		return ChangeCreated
	case to == "scheduled" && approvalNote != "" && strings.HasPrefix(note, approvalNote):
		return ChangeApproved
	}
	switch to {
	case "escalated", "awaiting_approval":
		return ChangeDecided
	case "replaying":
		return ChangeClaimed
	}
	return to
}

// ChangeRow is one row of the change feed.
type ChangeRow struct {
	// ChangeID is the row's id, derived from the transition (entry, time,
	// statuses), so a retried transaction writes the same row.
	ChangeID   string
	EntryID    string
	Tenant     string
	Agent      string
	TaskType   string
	Stream     string
	ReasonCode string
	Category   string
	Action     string
	Strategy   string
	Transition string
	FromStatus string
	ToStatus   string
	// ActorRole is the role of who made the move ("" for jsdlq's own
	// components; operator, approver, tenant, triage_agent): never the
	// actor's identity.
	ActorRole string
	// Attempt is how many replays the entry had published at the move.
	Attempt       int64
	PolicyVersion string
	PayloadSize   int64
	PayloadSHA256 string
	RootID        string
	ReplayOf      string
	// PredictedReason and PredictedProbability are what the agent kit's
	// pre-flight predicted for the task (its Jsdlq-Predicted-* headers), as
	// the entry recorded them; empty and 0 when nothing was predicted.
	PredictedReason      string
	PredictedProbability float64
	// CreatedAt is when the entry was recorded (the task died), At when
	// the move was made; AgeMs is the time between them in milliseconds
	// (what the weekly questions measure), ExpireAt when the entry leaves
	// the working set.
	CreatedAt time.Time
	At        time.Time
	AgeMs     int64
	ExpireAt  time.Time
	// Payload is the payload, base64, only when the entry's policy rule
	// asks for it (feed_payload) and the payload is inline; "" otherwise.
	Payload string
}

// ColumnType is a column's type, named as BigQuery names it.
type ColumnType string

// Column types.
const (
	ColString    ColumnType = "STRING"
	ColInt64     ColumnType = "INT64"
	ColFloat64   ColumnType = "FLOAT64"
	ColTimestamp ColumnType = "TIMESTAMP"
)

// Column is one column of the change feed: its name (JSON field, Avro
// field, table column, Parquet column), type, description, and the value
// of a row's.
type Column struct {
	Name string
	Type ColumnType
	Doc  string
	// Value is the row's value: a string, an int64, a float64, or a
	// time.Time for a timestamp.
	Value func(*ChangeRow) any
	// set sets the row's value from its JSON encoding.
	set func(*ChangeRow, json.RawMessage) error
}

func strCol(name, doc string, f func(*ChangeRow) *string) Column {
	return Column{Name: name, Type: ColString, Doc: doc, Value: func(r *ChangeRow) any { return *f(r) },
		set: func(r *ChangeRow, raw json.RawMessage) error { return json.Unmarshal(raw, f(r)) }}
}

func intCol(name, doc string, f func(*ChangeRow) *int64) Column {
	return Column{Name: name, Type: ColInt64, Doc: doc, Value: func(r *ChangeRow) any { return *f(r) },
		set: func(r *ChangeRow, raw json.RawMessage) error { return json.Unmarshal(raw, f(r)) }}
}

func floatCol(name, doc string, f func(*ChangeRow) *float64) Column {
	return Column{Name: name, Type: ColFloat64, Doc: doc, Value: func(r *ChangeRow) any { return *f(r) },
		set: func(r *ChangeRow, raw json.RawMessage) error { return json.Unmarshal(raw, f(r)) }}
}

// timeCol is a timestamp: microseconds since the epoch on the wire (Avro's
// timestamp-micros in its JSON encoding, which a BigQuery subscription
// writes into a TIMESTAMP column).
func timeCol(name, doc string, f func(*ChangeRow) *time.Time) Column {
	return Column{Name: name, Type: ColTimestamp, Doc: doc, Value: func(r *ChangeRow) any { return *f(r) },
		set: func(r *ChangeRow, raw json.RawMessage) error {
			var us int64
			if err := json.Unmarshal(raw, &us); err != nil {
				return err
			}
			*f(r) = time.UnixMicro(us).UTC()
			return nil
		}}
}

// ChangeColumns are the feed's columns, in order: the one source of every
// schema of the row.
var ChangeColumns = []Column{
	strCol("change_id", "the row's id, derived from the transition: deduplicate by it", func(r *ChangeRow) *string { return &r.ChangeID }),
	strCol("entry_id", "the failure-log entry", func(r *ChangeRow) *string { return &r.EntryID }),
	strCol("tenant", "the entry's tenant", func(r *ChangeRow) *string { return &r.Tenant }),
	strCol("agent", "the agent whose task died", func(r *ChangeRow) *string { return &r.Agent }),
	strCol("task_type", "the task's type", func(r *ChangeRow) *string { return &r.TaskType }),
	strCol("stream", "the work stream", func(r *ChangeRow) *string { return &r.Stream }),
	strCol("reason_code", "the failure's reason code", func(r *ChangeRow) *string { return &r.ReasonCode }),
	strCol("category", "transient, conditional, permanent, poison, governance or unknown", func(r *ChangeRow) *string { return &r.Category }),
	strCol("action", "the policy's action", func(r *ChangeRow) *string { return &r.Action }),
	strCol("strategy", "the replay strategy", func(r *ChangeRow) *string { return &r.Strategy }),
	strCol("transition", "created, decided, approved, scheduled, claimed, replayed, recovered, discarded, quarantined or held", func(r *ChangeRow) *string { return &r.Transition }),
	strCol("from_status", "the status before the move (empty for created)", func(r *ChangeRow) *string { return &r.FromStatus }),
	strCol("to_status", "the status after the move", func(r *ChangeRow) *string { return &r.ToStatus }),
	strCol("actor_role", "the role of who made the move; empty for jsdlq's own components", func(r *ChangeRow) *string { return &r.ActorRole }),
	intCol("attempt", "replays published before the move", func(r *ChangeRow) *int64 { return &r.Attempt }),
	strCol("policy_version", "the policy version that decided the entry", func(r *ChangeRow) *string { return &r.PolicyVersion }),
	intCol("payload_size", "the payload's size in bytes", func(r *ChangeRow) *int64 { return &r.PayloadSize }),
	strCol("payload_sha256", "the payload's SHA-256, hex", func(r *ChangeRow) *string { return &r.PayloadSHA256 }),
	strCol("root_id", "the first entry of the replay chain", func(r *ChangeRow) *string { return &r.RootID }),
	strCol("replay_of", "the entry this one is a replay of (empty for a first death)", func(r *ChangeRow) *string { return &r.ReplayOf }),
	strCol("predicted_reason", "the reason code the pre-flight predicted (empty: none)", func(r *ChangeRow) *string { return &r.PredictedReason }),
	floatCol("predicted_probability", "the pre-flight's probability of death (0: none)", func(r *ChangeRow) *float64 { return &r.PredictedProbability }),
	timeCol("created_at", "when the entry was recorded (the task died)", func(r *ChangeRow) *time.Time { return &r.CreatedAt }),
	timeCol("moved_at", "when the move was made (the table's partitioning column)", func(r *ChangeRow) *time.Time { return &r.At }),
	intCol("age_ms", "milliseconds from created_at to moved_at", func(r *ChangeRow) *int64 { return &r.AgeMs }),
	timeCol("expire_at", "when the entry leaves the working set (its TTL)", func(r *ChangeRow) *time.Time { return &r.ExpireAt }),
	strCol("payload", "the payload, base64, when the policy rule opts in (feed_payload); empty otherwise", func(r *ChangeRow) *string { return &r.Payload }),
}

// changeID derives the id of a row: the same transition always yields it.
func changeID(entryID, from, to string, at time.Time) string {
	sum := sha256.Sum256([]byte(entryID + "\x00" + from + "\x00" + to + "\x00" + strconv.FormatInt(at.UnixNano(), 10)))
	return hex.EncodeToString(sum[:16])
}

// NewChangeRow is the row of the move of entryID from → to at at (the row's
// other fields are the caller's to set).
func NewChangeRow(entryID, from, to string, at time.Time) ChangeRow {
	return ChangeRow{ChangeID: "c-" + changeID(entryID, from, to, at), EntryID: entryID, FromStatus: from, ToStatus: to, At: at.UTC()}
}

// Validate checks what every row must hold.
func (r ChangeRow) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: change %s: %s", ErrInvalid, r.ChangeID, fmt.Sprintf(format, a...))
	}
	switch {
	case r.ChangeID == "":
		return bad("no change_id")
	case r.EntryID == "":
		return bad("no entry_id")
	case r.Tenant == "":
		return bad("no tenant")
	case r.ToStatus == "":
		return bad("no to_status")
	case !slices.Contains(ChangeTransitions, r.Transition):
		return bad("unknown transition %q", r.Transition)
	case r.At.IsZero() || r.CreatedAt.IsZero():
		return bad("no time")
	}
	return nil
}

// Encode validates r and encodes it as the topic's schema's JSON encoding:
// every column, in order, timestamps as microseconds since the epoch.
func (r ChangeRow) Encode() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range ChangeColumns {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(c.Name)
		b.Write(name)
		b.WriteByte(':')
		v := c.Value(&r)
		if t, ok := v.(time.Time); ok {
			v = micros(t)
		}
		val, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: change %s: column %s: %w", ErrInvalid, r.ChangeID, c.Name, err)
		}
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// micros is t as the wire holds it (0 for the zero time).
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// DecodeChangeRow decodes and validates a row: every column must be there,
// and nothing else.
func DecodeChangeRow(data []byte) (ChangeRow, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return ChangeRow{}, fmt.Errorf("%w: change: %w", ErrInvalid, err)
	}
	var r ChangeRow
	for _, c := range ChangeColumns {
		raw, ok := fields[c.Name]
		if !ok {
			return ChangeRow{}, fmt.Errorf("%w: change: no column %q", ErrInvalid, c.Name)
		}
		if err := c.set(&r, raw); err != nil {
			return ChangeRow{}, fmt.Errorf("%w: change: column %s: %w", ErrInvalid, c.Name, err)
		}
		delete(fields, c.Name)
	}
	for k := range fields {
		return ChangeRow{}, fmt.Errorf("%w: change: unknown column %q", ErrInvalid, k)
	}
	return r, r.Validate()
}

// Attributes are the row's Pub/Sub attributes.
func (r ChangeRow) Attributes() map[string]string {
	return map[string]string{AttrKind: r.Transition, AttrTenant: r.Tenant, AttrChangeID: r.ChangeID}
}
