// Package store is jsdlq's Firestore access (SPEC §7): failure-log entries
// with their status machine and chunked payloads, hourly sharded metrics and
// per-tenant circuit breakers. Every status change is a transaction that
// checks the previous status; every write that may be retried is idempotent.
package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/event"
)

// Collections.
const (
	FailureLog      = "failure-log"
	PayloadChunks   = "payload" // subcollection of a failure-log entry
	MetricsColl     = "dlq-metrics"
	MetricsShards   = "shards" // subcollection of an hourly metrics document
	Breakers        = "circuit-breakers"
	TaskIdempotency = "task-idempotency"
	Audits          = "dlq-audits"
)

// Errors.
var (
	ErrNotFound    = errors.New("store: not found")
	ErrWrongStatus = errors.New("store: entry is not in the expected status")
	ErrConflict    = errors.New("store: concurrent update conflict")
	ErrBadID       = errors.New("store: bad id")
	ErrCorrupt     = errors.New("store: stored payload does not match its sha256")
	ErrTooLarge    = errors.New("store: payload too large")
	ErrInvalid     = errors.New("store: invalid entry")
)

// Retention: entries (and their payload chunks) carry expire_at = created +
// Retention for the TTL policy.
const Retention = 30 * 24 * time.Hour

// Store is the Firestore access of every jsdlq component. It is safe for
// concurrent use.
type Store struct {
	fs      *firestore.Client
	now     func() time.Time
	shards  int
	breaker BreakerConfig
	reads   atomic.Int64
	writes  atomic.Int64
	// openSince caches, per tenant, when a breaker this instance saw open
	// was opened (see Store.knownOpen).
	openSince sync.Map
}

// Option configures New.
type Option func(*Store)

// WithClock replaces time.Now (breaker windows, created_at, hour buckets).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithShards sets the number of counter shards per metrics hour (default 8):
// each shard takes about one write per second, so this bounds the sustained
// classify rate the metrics allow.
func WithShards(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.shards = n
		}
	}
}

// WithBreaker sets the breaker thresholds.
func WithBreaker(c BreakerConfig) Option { return func(s *Store) { s.breaker = c } }

// New returns a Store over fs.
func New(fs *firestore.Client, opts ...Option) *Store {
	s := &Store{fs: fs, now: time.Now, shards: 8, breaker: DefaultBreaker}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Client is the underlying Firestore client.
func (s *Store) Client() *firestore.Client { return s.fs }

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.now().UTC() }

// Ops counts the Firestore document reads and writes this Store made, as the
// code path issues them (a transaction retried by the client counts again).
type Ops struct{ Reads, Writes int64 }

// Ops returns the reads and writes made so far.
func (s *Store) Ops() Ops { return Ops{Reads: s.reads.Load(), Writes: s.writes.Load()} }

func (s *Store) read(n int)  { s.reads.Add(int64(n)) }
func (s *Store) wrote(n int) { s.writes.Add(int64(n)) }

// Status of an entry (SPEC §7).
type Status string

// Statuses.
const (
	Scheduled        Status = "scheduled"
	Replaying        Status = "replaying"
	Replayed         Status = "replayed"
	Recovered        Status = "recovered"
	AwaitingApproval Status = "awaiting_approval"
	Quarantined      Status = "quarantined"
	Held             Status = "held"
	Escalated        Status = "escalated"
	Discarded        Status = "discarded"
)

// Terminal reports whether no further automatic step follows the status.
func (st Status) Terminal() bool {
	return st == Recovered || st == Discarded
}

// MaxHistory bounds the transitions kept on an entry or breaker.
const MaxHistory = 50

// Transition is one status change.
type Transition struct {
	At   time.Time `firestore:"at" json:"at"`
	From string    `firestore:"from" json:"from"`
	To   string    `firestore:"to" json:"to"`
	By   string    `firestore:"by" json:"by"`
	Note string    `firestore:"note,omitempty" json:"note,omitempty"`
}

func appendHistory(h []Transition, t Transition) []Transition {
	h = append(h, t)
	if len(h) > MaxHistory {
		h = append([]Transition(nil), h[len(h)-MaxHistory:]...)
	}
	return h
}

// Plan is the replay a decision asked for: strategy details the replay
// function applies.
type Plan struct {
	DelaySeconds     float64  `firestore:"delay_seconds,omitempty" json:"delay_seconds,omitempty"`
	Budget           int      `firestore:"budget,omitempty" json:"budget,omitempty"`
	Instructions     []string `firestore:"instructions,omitempty" json:"instructions,omitempty"`
	TargetModel      string   `firestore:"target_model,omitempty" json:"target_model,omitempty"`
	MaxContextTokens int      `firestore:"max_context_tokens,omitempty" json:"max_context_tokens,omitempty"`
	MaxOutputTokens  int      `firestore:"max_output_tokens,omitempty" json:"max_output_tokens,omitempty"`
	AlternateAgent   string   `firestore:"alternate_agent,omitempty" json:"alternate_agent,omitempty"`
	AlternateSubject string   `firestore:"alternate_subject,omitempty" json:"alternate_subject,omitempty"`
	EscalateTo       string   `firestore:"escalate_to,omitempty" json:"escalate_to,omitempty"`
	Note             string   `firestore:"note,omitempty" json:"note,omitempty"`
}

// Entry is a failure-log document.
type Entry struct {
	ID             string              `firestore:"-" json:"id"`
	EventID        string              `firestore:"event_id" json:"event_id"`
	Stream         string              `firestore:"stream" json:"stream"`
	Consumer       string              `firestore:"consumer,omitempty" json:"consumer,omitempty"`
	StreamSeq      int64               `firestore:"stream_seq" json:"stream_seq"`
	Subject        string              `firestore:"subject" json:"subject"`
	Tenant         string              `firestore:"tenant" json:"tenant"`
	Agent          string              `firestore:"agent" json:"agent"`
	TaskID         string              `firestore:"task_id,omitempty" json:"task_id,omitempty"`
	TaskType       string              `firestore:"task_type,omitempty" json:"task_type,omitempty"`
	IdempotencyKey string              `firestore:"idempotency_key,omitempty" json:"idempotency_key,omitempty"`
	Headers        map[string][]string `firestore:"headers,omitempty" json:"headers,omitempty"`
	// Payload is inline when at most InlinePayload bytes; larger payloads are
	// in PayloadChunkCount chunk documents and Payload is empty in storage
	// (Get fills it).
	Payload           []byte `firestore:"payload,omitempty" json:"-"`
	PayloadChunkCount int    `firestore:"payload_chunks,omitempty" json:"payload_chunks,omitempty"`
	PayloadSHA256     string `firestore:"payload_sha256,omitempty" json:"payload_sha256,omitempty"`
	PayloadSize       int64  `firestore:"payload_size" json:"payload_size"`
	PayloadMissing    bool   `firestore:"payload_missing,omitempty" json:"payload_missing,omitempty"`
	// PayloadTruncated: the bridge knew the payload (size, digest) but it
	// did not fit into the event; PayloadMissing is set too.
	PayloadTruncated bool      `firestore:"payload_truncated,omitempty" json:"payload_truncated,omitempty"`
	PublishedAt      time.Time `firestore:"published_at,omitempty" json:"published_at,omitempty"`
	Kind             string    `firestore:"kind" json:"kind"`
	// Kinds are every event kind merged into the entry (advisory + explicit).
	Kinds      []string       `firestore:"kinds" json:"kinds"`
	Deliveries int            `firestore:"deliveries,omitempty" json:"deliveries,omitempty"`
	TermReason string         `firestore:"term_reason,omitempty" json:"term_reason,omitempty"`
	Failure    *event.Failure `firestore:"failure,omitempty" json:"failure,omitempty"`

	Category      string `firestore:"category" json:"category"`
	ReasonCode    string `firestore:"reason_code" json:"reason_code"`
	ReasonRoute   string `firestore:"reason_route,omitempty" json:"reason_route,omitempty"`
	Rule          string `firestore:"rule,omitempty" json:"rule,omitempty"`
	Action        string `firestore:"action" json:"action"`
	Strategy      string `firestore:"strategy" json:"strategy"`
	Plan          Plan   `firestore:"plan" json:"plan"`
	PolicyVersion string `firestore:"policy_version" json:"policy_version"`

	Status      Status    `firestore:"status" json:"status"`
	Replays     int       `firestore:"replays" json:"replays"`
	NextRetryAt time.Time `firestore:"next_retry_at" json:"next_retry_at"`
	TaskName    string    `firestore:"task_name,omitempty" json:"task_name,omitempty"`
	// BreakerProbe marks the one replay a half-open tenant breaker lets through.
	BreakerProbe bool `firestore:"breaker_probe,omitempty" json:"breaker_probe,omitempty"`
	// PublishedSeq is the work-stream sequence of the replay (replay sets it).
	PublishedSeq int64 `firestore:"published_seq,omitempty" json:"published_seq,omitempty"`

	ReplayOf string `firestore:"replay_of,omitempty" json:"replay_of,omitempty"`
	RootID   string `firestore:"root_id" json:"root_id"`
	// ChainCodes and ChainStrategies are the reason codes and strategies of
	// this entry's ancestors, root first, so a replay's failure is judged
	// against its whole chain with one read.
	ChainCodes      []string `firestore:"chain_codes,omitempty" json:"chain_codes,omitempty"`
	ChainStrategies []string `firestore:"chain_strategies,omitempty" json:"chain_strategies,omitempty"`

	History    []Transition `firestore:"history" json:"history"`
	CreatedAt  time.Time    `firestore:"created_at" json:"created_at"`
	UpdatedAt  time.Time    `firestore:"updated_at" json:"updated_at"`
	ResolvedAt time.Time    `firestore:"resolved_at,omitempty" json:"resolved_at,omitempty"`
	ExpireAt   time.Time    `firestore:"expire_at" json:"expire_at"`
}

func (s *Store) entryRef(id string) *firestore.DocumentRef {
	return s.fs.Collection(FailureLog).Doc(id)
}

// Get reads an entry with its payload reassembled and verified.
func (s *Store) Get(ctx context.Context, id string) (*Entry, error) {
	e, err := s.GetMeta(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.loadPayload(ctx, e); err != nil {
		return nil, err
	}
	return e, nil
}

// GetMeta reads an entry without fetching payload chunks (inline payloads are
// included).
func (s *Store) GetMeta(ctx context.Context, id string) (*Entry, error) {
	snap, err := s.entryRef(id).Get(ctx)
	s.read(1)
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("%w: entry %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("firestore get %s/%s: %w", FailureLog, id, err)
	}
	return decodeEntry(snap)
}

func decodeEntry(snap *firestore.DocumentSnapshot) (*Entry, error) {
	var e Entry
	if err := snap.DataTo(&e); err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", FailureLog, snap.Ref.ID, err)
	}
	e.ID = snap.Ref.ID
	return &e, nil
}

// Change is a status transition of an entry.
type Change struct {
	From []Status // the statuses the entry must be in
	To   Status
	By   string // who made the change (component or operator)
	Note string
	// Apply edits other fields in the same transaction (may be nil). It sees
	// the entry as read inside the transaction.
	Apply func(*Entry) error
	// Count, when set, is added to the metrics of the transition's hour in
	// the same transaction: a count of what the transition did (a replay
	// published, an entry recovered) is made exactly when the transition
	// is, whatever crashes or retries come between.
	Count *Metrics
}

// Transition changes an entry's status in a transaction that checks the
// previous status: ErrWrongStatus (wrapped, with the actual status) when it
// is not one of c.From, ErrNotFound when there is no entry, ErrConflict when
// contention outlasted the client's retries.
func (s *Store) Transition(ctx context.Context, id string, c Change) (*Entry, error) {
	// One transaction body for every caller: a status that is not resolved
	// carries no resolved_at, whichever path moved the entry there.
	return s.TransitionScoped(ctx, id, AllTenants, c, nil)
}

func txError(op string, err error) error {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrWrongStatus), errors.Is(err, ErrBadID), errors.Is(err, ErrCorrupt), errors.Is(err, ErrInvalid), errors.Is(err, ErrTooLarge):
		return err
	case status.Code(err) == codes.Aborted:
		return fmt.Errorf("%w: %s: %w", ErrConflict, op, err)
	}
	return fmt.Errorf("firestore %s: %w", op, err)
}

// ListByStatus returns up to limit entries in a status, oldest next_retry_at
// first (index status + next_retry_at), without payload chunks.
func (s *Store) ListByStatus(ctx context.Context, st Status, limit int) ([]*Entry, error) {
	q := s.fs.Collection(FailureLog).Where("status", "==", string(st)).OrderBy("next_retry_at", firestore.Asc).Limit(limit)
	return s.list(ctx, q)
}

// ListSince returns up to limit entries created at or after t, oldest first.
func (s *Store) ListSince(ctx context.Context, t time.Time, limit int) ([]*Entry, error) {
	q := s.fs.Collection(FailureLog).Where("created_at", ">=", t).OrderBy("created_at", firestore.Asc).Limit(limit)
	return s.list(ctx, q)
}

func (s *Store) list(ctx context.Context, q firestore.Query) ([]*Entry, error) {
	snaps, err := q.Documents(ctx).GetAll()
	s.read(max(1, len(snaps)))
	if err != nil {
		return nil, fmt.Errorf("firestore query %s: %w", FailureLog, err)
	}
	out := make([]*Entry, 0, len(snaps))
	for _, snap := range snaps {
		e, err := decodeEntry(snap)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}
