package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file holds the failure-log entry (docs/storage.md): its fields, its
// status machine and the transitions every component and operator makes.
// Creating and merging an entry is in record.go, its payload in payload.go.

// MaxHistory bounds the transitions kept on an entry or breaker.
const MaxHistory = 50

// Transition is one status change.
type Transition struct {
	At   time.Time `firestore:"at" json:"at"`
	From string    `firestore:"from" json:"from"`
	To   string    `firestore:"to" json:"to"`
	By   string    `firestore:"by" json:"by"`
	// Role is the role By acted in (an operator's, a tenant key's, the
	// triage agent's); "" for jsdlq's own components, and for transitions
	// recorded before roles existed.
	Role authority.Role `firestore:"role,omitempty" json:"role,omitempty"`
	Note string         `firestore:"note,omitempty" json:"note,omitempty"`
}

// Actor is who made the transition, in which role.
func (t Transition) Actor() authority.Actor { return authority.Actor{Name: t.By, Role: t.Role} }

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
	DelaySeconds float64 `firestore:"delay_seconds,omitempty" json:"delay_seconds,omitempty"`
	Budget       int     `firestore:"budget,omitempty" json:"budget,omitempty"`
	// The task changes are the policy's own type, stored flat (Firestore and
	// JSON both flatten an embedded struct), so the document is unchanged;
	// its Replay (promoted) is the replay's Jsdlq-* headers.
	triage.Modifications
	EscalateTo string `firestore:"escalate_to,omitempty" json:"escalate_to,omitempty"`
	Note       string `firestore:"note,omitempty" json:"note,omitempty"`
	// RetentionHours is how long the policy keeps the entry from its
	// creation (expire_at); 0 in entries decided before it did: Retention.
	RetentionHours int `firestore:"retention_hours,omitempty" json:"retention_hours,omitempty"`
	// FeedPayload: the policy rule puts the payload into the change feed's
	// rows (ChangeRowOf).
	FeedPayload bool `firestore:"feed_payload,omitempty" json:"feed_payload,omitempty"`
}

// Retention is how long the entry is kept from its creation.
func (p Plan) Retention() time.Duration {
	if p.RetentionHours <= 0 {
		return Retention
	}
	return time.Duration(p.RetentionHours) * time.Hour
}

// expire sets expire_at from the entry's creation and its plan's retention:
// the one place it is set, whether the entry is new (Record) or its plan
// changes (a re-evaluation, through Transition). It reports whether
// expire_at changed.
func (e *Entry) expire() bool {
	at := e.CreatedAt.Add(e.Plan.Retention())
	if at.Equal(e.ExpireAt) {
		return false
	}
	e.ExpireAt = at
	return true
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
	// PayloadVersions are the approved edits of the payload, version 2 on:
	// the payload above is version 1 and is never rewritten (version.go;
	// Versions lists them all, which is how every view shows them).
	PayloadVersions []PayloadVersion `firestore:"payload_versions,omitempty" json:"-"`
	// PayloadVersion is the version the next replay publishes (0: the
	// original; ReplayVersion reads it).
	PayloadVersion int `firestore:"payload_version,omitempty" json:"-"`
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
	// InvalidNames flags an entry whose task carried names that break the
	// naming rule (docs/contracts.md, "Names"): it is recorded under
	// event.ReservedTenant, and these are the names it carried.
	InvalidNames []event.InvalidName `firestore:"invalid_names,omitempty" json:"invalid_names,omitempty"`
	// TenantFold and AgentFold are Tenant and Agent in lower case, which
	// a query with FoldCase matches (an operator's "t05" finds "T05"):
	// written with every write of the entry (foldNames), never shown.
	TenantFold string `firestore:"tenant_fold,omitempty" json:"-"`
	AgentFold  string `firestore:"agent_fold,omitempty" json:"-"`
	// TaskTenant is, on an entry under the reserved tenant, the tenant its
	// message's headers name as an agent's kit reads them: the tenant of
	// the task's completion record (Task). Empty when the headers were not
	// captured, or when that name is no completion record's (not UTF-8,
	// over event.KeptNameBytes).
	TaskTenant string `firestore:"task_tenant,omitempty" json:"task_tenant,omitempty"`

	Category      string `firestore:"category" json:"category"`
	ReasonCode    string `firestore:"reason_code" json:"reason_code"`
	ReasonRoute   string `firestore:"reason_route,omitempty" json:"reason_route,omitempty"`
	Rule          string `firestore:"rule,omitempty" json:"rule,omitempty"`
	Action        string `firestore:"action" json:"action"`
	Strategy      string `firestore:"strategy" json:"strategy"`
	Plan          Plan   `firestore:"plan" json:"plan"`
	PolicyVersion string `firestore:"policy_version" json:"policy_version"`

	Status  Status `firestore:"status" json:"status"`
	Replays int    `firestore:"replays" json:"replays"`
	// NextRetryAt is when the replay is due; once replayed, when reconcile
	// next looks for the task's completion.
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

	// seen is the document's update time as this store last read or wrote
	// it (zero: unknown), the precondition of TransitionSeen; view: the
	// fields it was read with (FullView: whole; partialView: a projection
	// no View names), which decide whether TransitionSeen may move it.
	seen time.Time
	view View
	// parent is the entry this one replays as LinkReplay read it, for
	// Record's handOffCheck; nil when unlinked.
	parent *Entry
}

// partialView is the view of an entry read through a projection that is
// none of the query Views (the learner's, a recount's): TransitionSeen
// never moves one without reading it again.
const partialView View = -1

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
	// An id from the wire that EntryID cannot have made (not UTF-8, a
	// '/', over Firestore's limit) never reaches Firestore as a path.
	if _, err := EventID(id); err != nil {
		return nil, err
	}
	return getDoc(ctx, s, s.entryRef(id), "entry", decodeEntry)
}

func decodeEntry(snap *firestore.DocumentSnapshot) (*Entry, error) {
	e, err := decodeDoc(snap, func(e *Entry) *string { return &e.ID })
	if err != nil {
		return nil, err
	}
	// Every stored entry has a plan, and no view reads it: without one,
	// the entry is a projection, which only Entries can name.
	e.seen = snap.UpdateTime
	// An entry written before the fold fields gets them with its next
	// write, since every write sets the document it read.
	e.foldNames()
	if _, err := snap.DataAt("plan"); err != nil {
		e.view = partialView
	}
	return e, nil
}

// foldNames sets the case-folded copies of the names a FoldCase query
// matches; called before every write that may change them.
func (e *Entry) foldNames() {
	e.TenantFold, e.AgentFold = FoldName(e.Tenant), FoldName(e.Agent)
}

// FoldName is a tenant or agent name as a FoldCase query compares it.
func FoldName(name string) string { return strings.ToLower(name) }

// Change is a status transition of an entry.
type Change struct {
	// From are the statuses the entry must be in: a Move's From, narrowed
	// (Move.Only); the move from the entry's status to To must be one the
	// status table allows (ErrTransition).
	From []Status
	To   Status
	By   string // who made the change (component or operator)
	// Role is the role By acts in ("" for a component).
	Role authority.Role
	Note string
	// Apply edits other fields in the same transaction (may be nil). It sees
	// the entry as read inside the transaction. It replaces a field's
	// slice, map or pointer rather than editing what it refers to
	// (Headers excepted: TransitionSeen copies them first): the move keeps
	// a shallow copy of the entry as it was, and what it writes (the
	// tenant counters, TransitionSeen's changed fields) is the difference.
	Apply func(*Entry) error
	// Count, when set, is added to the metrics of the transition's hour in
	// the same transaction: a count of what the transition did (a replay
	// published, an entry recovered) is made exactly when the transition
	// is, whatever crashes or retries come between.
	Count *Metrics
}

// Transition changes an entry's status in a transaction that checks the
// previous status (and adds the difference the move makes to the entry's
// tenant-hour counters, tenanthealth.go, in the same transaction): ErrWrongStatus (wrapped, with the actual status) when it
// is not one of c.From, a TransitionError (ErrTransition) when the status
// table allows no move from it to c.To, ErrNotFound when there is no entry, ErrConflict when
// contention outlasted the client's retries.
func (s *Store) Transition(ctx context.Context, id string, c Change) (*Entry, error) {
	// One transaction body for every caller: a status that is not resolved
	// carries no resolved_at, whichever path moved the entry there.
	return s.TransitionScoped(ctx, id, AllTenants, c, nil)
}

// AllTenants is the scope of an operator who may act on every tenant.
const AllTenants = ""

// ApprovalNote starts the history note of an operator's approval
// (shared/operator). A replay scheduled by an approval skips the policy and
// breaker checks: a human decided on exactly this replay.
const ApprovalNote = "approved"

// Approved reports whether an operator's approval is in force for the
// entry's pending replay: its history, read backwards, reaches an approval
// (a move into scheduled noted ApprovalNote) before any decision point. The
// moves a replay makes while it waits for its gates do not end an approval:
// held by the breaker and released again, claimed and requeued, run now,
// sent as the breaker's probe. A publish (replayed) or a new human decision
// (awaiting approval, quarantined, escalated, discarded, recovered) does:
// the next replay is judged by the policy again.
func (e *Entry) Approved() bool {
	for i := len(e.History) - 1; i >= 0; i-- {
		t := e.History[i]
		switch Status(t.To) {
		case Scheduled:
			if strings.HasPrefix(t.Note, ApprovalNote) {
				return true
			}
		case Held, Replaying:
		default:
			return false
		}
	}
	return false
}

// TransitionScoped is Transition for a caller scoped to one tenant (tenant
// AllTenants: any). An entry of another tenant is ErrNotFound, decided before
// its status is looked at, so a scoped caller learns nothing about it.
//
// A non-nil edit is an approval's (version.go): with a payload or headers
// it makes a new payload version in the same transaction, which the next
// replay publishes (the chunks of a new payload are written first, under
// content-derived ids, so a retried or abandoned edit leaves only
// identical documents or orphans that expire); the original and earlier
// versions are never rewritten. The history note names the version.
func (s *Store) TransitionScoped(ctx context.Context, id, tenant string, c Change, edit *Edit) (*Entry, error) {
	staged, err := s.stageEdit(ctx, id, edit)
	if err != nil {
		return nil, err
	}
	var out *Entry
	var commit firestore.CommitResponse
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		e, err := txGet(s, tx, s.entryRef(id), "entry", decodeEntry)
		if err != nil {
			return err
		}
		if tenant != AllTenants && e.Tenant != tenant {
			return fmt.Errorf("%w: entry %q", ErrNotFound, id)
		}
		if err := s.move(tx, e, c, staged, true); err != nil {
			return err
		}
		if staged != nil && staged.changes() {
			size, err := entryDocSize(e)
			if err != nil {
				return err
			}
			if size > maxEditedEntry {
				return fmt.Errorf("%w: entry %s: with the edit its document would take about %d bytes, at most %d (Firestore's 1 MiB)", ErrTooLarge, id, size, maxEditedEntry)
			}
		}
		out = e
		s.wrote(1)
		return tx.Set(s.entryRef(id), e)
	}, firestore.WithCommitResponseTo(&commit))
	if err != nil {
		return nil, txError("transition "+id, err)
	}
	out.seen = commit.CommitTime()
	return out, nil
}

// move makes change c to e, read in tx, and writes in tx what the move
// counts and notifies (not e itself): the one status move of
// TransitionScoped and TransitionSeen. expire: e holds its plan and
// retention, so expire_at follows them (a projection does not).
func (s *Store) move(tx *firestore.Transaction, e *Entry, c Change, staged *stagedEdit, expire bool) error {
	id := e.ID
	// The entry as it was, for the difference the move makes to its
	// tenant-hour counters (Apply and the move below replace fields,
	// they do not edit this copy's).
	before := *e
	if !slices.Contains(c.From, e.Status) {
		return fmt.Errorf("%w: entry %q is %s, want one of %v", ErrWrongStatus, id, e.Status, c.From)
	}
	if c.Apply != nil {
		if err := c.Apply(e); err != nil {
			return err
		}
	}
	// After Apply, which may end a change it was asked to look at (the
	// replay's claim reads a redelivery this way); what is written is
	// what the table allows.
	if !before.Status.CanMove(c.To) {
		return &TransitionError{Entry: id, From: before.Status, To: c.To}
	}
	now := s.Now()
	note := c.Note
	if staged != nil {
		more, err := applyEdit(e, staged, now)
		if err != nil {
			return err
		}
		note += more
	}
	// The payload's chunks follow the entry, in the same transaction:
	// every version's when a re-evaluation changed the retention (expire
	// first: it sets expire_at), and a new version's, staged with the
	// default retention (so that an abandoned edit's orphans expire).
	switch {
	case expire && e.expire():
		if err := s.expireChunkRefs(tx, e, chunkSets(e.Versions())); err != nil {
			return err
		}
	case staged != nil && staged.bytes != nil && staged.bytes.PayloadChunkCount > 0:
		if err := s.expireChunkRefs(tx, e, chunkSets([]PayloadVersion{e.Versions()[e.PayloadVersion-1]})); err != nil {
			return err
		}
	}
	from := e.Status
	e.History = appendHistory(e.History, Transition{At: now, From: string(e.Status), To: string(c.To), By: c.By, Role: c.Role, Note: note})
	e.Status = c.To
	e.UpdatedAt = now
	if c.To == Replayed {
		// A replayed entry's replay is done; its next_retry_at becomes when
		// reconcile next looks for its completion (Query.DueBy, DeferCheck):
		// at once.
		e.NextRetryAt = now
	}
	if c.To.Settled() {
		e.ResolvedAt = now
	} else {
		e.ResolvedAt = time.Time{}
	}
	if err := s.countMove(tx, &before, e, c.Count, now); err != nil {
		return err
	}
	if _, err := s.stageChange(tx, e); err != nil {
		return err
	}
	_, err := s.notifyEntry(tx, e, from, now)
	return err
}

// MarkRecovered moves an entry from one of from to recovered, counting it
// in the hour's replays_recovered in the same transaction, and, when the entry is its tenant breaker's
// half-open probe, reports the probe recovered, which closes the breaker.
//
// The entries the entry replays (its replay chain, whose replays died
// again) that are still replayed are recovered with it: their task is the
// same, and it completed (recoverChain).
//
// It is safe to repeat: an entry that is recovered already is not counted
// again, but keeping its completion record, its probe report and the walk
// up its chain are repeated (they come after the transition, so a caller
// whose call failed repeats it until it succeeds: replay's Cloud Tasks
// retry finishes the recovery its task began).
func (s *Store) MarkRecovered(ctx context.Context, id string, from []Status, by, note string) (*Entry, error) {
	return s.markRecovered(ctx, id, func(c Change) (*Entry, error) { return s.Transition(ctx, id, c) }, from, by, note, s.KeepCompletion)
}

// MarkRecoveredSeen is MarkRecovered for a caller that has just read the
// entry (ScanView will do, TransitionSeen) and the task's
// completion record (Completions, c): the move and keeping the record as
// long as the entry are writes conditioned on each being unchanged since,
// with no second read of either.
func (s *Store) MarkRecoveredSeen(ctx context.Context, seen *Entry, from []Status, by, note string, c Completion) (*Entry, error) {
	return s.markRecovered(ctx, seen.ID, func(ch Change) (*Entry, error) { return s.TransitionSeen(ctx, seen, ch) }, from, by, note,
		func(ctx context.Context, e *Entry) error { return s.keepSeenCompletion(ctx, e, c) })
}

func (s *Store) markRecovered(ctx context.Context, id string, move func(Change) (*Entry, error), from []Status, by, note string, keep func(context.Context, *Entry) error) (*Entry, error) {
	e, err := s.recoverOne(ctx, id, move, from, by, note, keep)
	if err != nil {
		return e, err
	}
	// Repeated with the entry, so a caller that repeats the call finishes
	// a walk that failed midway; one that gives up (reconcile's scan no
	// longer reads a recovered entry) leaves the rest to the parents' last
	// check (ChainCheckMargin), which finds the completion record kept.
	if err := s.recoverChain(ctx, e, by); err != nil {
		return e, fmt.Errorf("entry %s recovered; %w", id, err)
	}
	return e, nil
}

// recoverOne is markRecovered for one entry, its replay chain left alone.
func (s *Store) recoverOne(ctx context.Context, id string, move func(Change) (*Entry, error), from []Status, by, note string, keep func(context.Context, *Entry) error) (*Entry, error) {
	e, err := move(Change{From: from, To: Recovered, By: by, Note: note, Count: &Metrics{ReplaysRecovered: 1}})
	if errors.Is(err, ErrWrongStatus) {
		cur, gerr := s.GetMeta(ctx, id)
		if gerr != nil || cur.Status != Recovered {
			return nil, err
		}
		e = cur
	} else if err != nil {
		return nil, err
	}
	// Recovered because the completion record exists: it now lasts as long
	// as the entry, which may still be redriven.
	if err := keep(ctx, e); err != nil {
		return e, fmt.Errorf("entry %s recovered; %w", id, err)
	}
	if e.BreakerProbe {
		if _, err := s.BreakerProbeResult(ctx, e.Tenant, e.ID, true, by); err != nil {
			return e, fmt.Errorf("entry %s recovered; breaker probe result not recorded: %w", id, err)
		}
	}
	return e, nil
}

// RequeueTask moves an entry to scheduled under a new task name, but only
// while it is still in one of from with the task name the caller saw (so a
// replay or operator that moved it on meanwhile wins, and two reconcile runs
// never both re-queue it). It returns ErrWrongStatus (wrapped) otherwise.
func (s *Store) RequeueTask(ctx context.Context, id string, from []Status, sawTask, newTask string, at time.Time, by, note string) (*Entry, error) {
	return s.Transition(ctx, id, Change{
		From: from, To: Scheduled, By: by, Note: note,
		Apply: func(e *Entry) error {
			if e.TaskName != sawTask {
				return fmt.Errorf("%w: entry %q now belongs to task %q, not %q", ErrWrongStatus, id, e.TaskName, sawTask)
			}
			e.TaskName, e.NextRetryAt = newTask, at
			return nil
		},
	})
}

// EntriesByID reads entries (without payload chunks) by id; ids without an
// entry are absent from the map.
func (s *Store) EntriesByID(ctx context.Context, ids []string) (map[string]*Entry, error) {
	out := make(map[string]*Entry, len(ids))
	for start := 0; start < len(ids); start += 300 {
		chunk := ids[start:min(len(ids), start+300)]
		refs := make([]*firestore.DocumentRef, len(chunk))
		for i, id := range chunk {
			refs[i] = s.entryRef(id)
		}
		snaps, err := s.fs.GetAll(ctx, refs)
		s.read(len(refs))
		if err != nil {
			return nil, fmt.Errorf("firestore get %d entries: %w", len(refs), err)
		}
		for _, snap := range snaps {
			if !snap.Exists() {
				continue
			}
			e, err := decodeEntry(snap)
			if err != nil {
				return nil, err
			}
			e.Payload = nil // never needed by a batch lookup; keep memory flat
			out[e.ID] = e
		}
	}
	return out, nil
}

// countMove writes, in the move's transaction, what a status move counts:
// count (if any) in the hour of the move, and the difference the move makes
// to the entry's tenant-hour counters in the hour of its creation (and so
// to the statuses of its day rollup's row, addCounts). Both go to the
// entry's shard, so when the hours are the same it is one write, and one
// more for the rollup.
func (s *Store) countMove(tx *firestore.Transaction, before, after *Entry, count *Metrics, now time.Time) error {
	created, moved := Hour(after.CreatedAt), Hour(now)
	tenants := tenantDelta(before, after)
	writes := map[string]Metrics{}
	if count != nil {
		writes[moved] = *count
	}
	if o := moveOutcomes(after, after.History); !o.IsZero() {
		m := writes[moved]
		m.Outcomes.Add(o)
		writes[moved] = m
	}
	if tenants != nil {
		m := writes[created]
		m.Tenants = tenants
		writes[created] = m
	}
	for _, hour := range slices.Sorted(maps.Keys(writes)) {
		if err := s.addCounts(tx, hour, after.ID, writes[hour], now); err != nil {
			return err
		}
	}
	return nil
}
