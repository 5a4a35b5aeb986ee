// Package store is jsdlq's Firestore access (docs/storage.md), one file per
// aggregate: failure-log entries with their status machine (entry.go,
// record.go) and chunked payloads (payload.go), the typed entry queries
// (query.go), hourly sharded metrics (metrics.go), the day rollups a
// dashboard reads (rollup.go) and stream samples (samples.go), per-tenant circuit breakers (breaker.go), task completions
// (idempotency.go), reconcile's lease, state and reports (audit.go), the
// triage policy override (policy.go, policyloader.go), tenant API keys
// (tenantkey.go), the notifications outbox (notifications.go), tenant
// webhook endpoints (webhook.go), the console's bulk redrive runs
// (bulkrun.go) and the one
// mapping between events, entries and the triage engine (decide.go). Every
// status change is a transaction
// that checks the previous status; every write that may be retried is
// idempotent. Field names are the store's own: callers say what they want
// with typed values (Query, Change, Metrics), never with Firestore paths.
package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// Collections.
const (
	FailureLog      = "failure-log"
	PayloadChunks   = "payload" // subcollection of a failure-log entry
	MetricsColl     = "dlq-metrics"
	MetricsShards   = "shards" // subcollection of an hourly metrics document
	Breakers        = "circuit-breakers"
	TaskIdempotency = agentkit.DefaultIdempotencyCollection // agentkit.Once's completion records
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
	// ErrTransition: a status change the status table (status.go) does not
	// allow; a TransitionError names it. A caller's bug, never a race (a
	// race is ErrWrongStatus).
	ErrTransition = errors.New("store: the status table does not allow this transition")
	// ErrLeaseLost: the owner acting on a leased document (a notification
	// it claimed, a bulk run it works) no longer holds the lease; another
	// owner took it over after it expired, and this one must stop.
	ErrLeaseLost = errors.New("store: the lease is held by another owner")
)

// Retention is how long an entry is kept when its plan names no retention
// (entries decided before policies set it) and how long payload chunks not
// yet bound to an entry are kept. The policy decides each entry's own
// (Plan.RetentionHours, Entry.expire).
const Retention = triage.DefaultRetention

// Store is the Firestore access of every jsdlq component. It is safe for
// concurrent use.
type Store struct {
	fs      *firestore.Client
	now     func() time.Time
	shards  int
	breaker BreakerConfig
	// legacyUntil ends the window in which older kits' completion records
	// are honoured (WithLegacyCompletionsUntil; zero: no end set).
	legacyUntil time.Time
	reads       atomic.Int64
	writes      atomic.Int64
	// openSince caches, per tenant, when a breaker this instance saw open
	// was opened and when it saw it (a sawOpen; see Store.knownOpen).
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

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.now().UTC() }

// Ops counts the Firestore document reads and writes this Store made, as the
// code path issues them (a transaction retried by the client counts again).
type Ops struct{ Reads, Writes int64 }

// Ops returns the reads and writes made so far.
func (s *Store) Ops() Ops { return Ops{Reads: s.reads.Load(), Writes: s.writes.Load()} }

func (s *Store) read(n int)  { s.reads.Add(int64(n)) }
func (s *Store) wrote(n int) { s.writes.Add(int64(n)) }

func txError(op string, err error) error {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrWrongStatus), errors.Is(err, ErrBadID), errors.Is(err, ErrCorrupt), errors.Is(err, ErrInvalid), errors.Is(err, ErrTooLarge),
		errors.Is(err, ErrLeaseLost):
		return err
	case status.Code(err) == codes.Aborted:
		return fmt.Errorf("%w: %s: %w", ErrConflict, op, err)
	}
	return fmt.Errorf("firestore %s: %w", op, err)
}

// isNotFound reports whether a Firestore read found no document.
func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }
