package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
)

// This file reads task-idempotency: the completion records
// agentkit.Once writes, which say whether a dead task is done already. A
// record belongs to a task of one tenant (agentkit.IdempotencyDocID); while
// the migration window lasts (WithLegacyCompletionsUntil), a record an
// older kit wrote under the key alone is honoured where it can speak for
// the entry's task (agentkit.IdempotencyRecord.For).

// WithLegacyCompletionsUntil ends, at until, the window in which the store
// honours the completion records older kits wrote with no tenant (zero, the
// default: no end set; LEGACY_COMPLETIONS_UNTIL in the components'
// environment). After it only tenant-scoped records count, and a lookup
// that misses reads one document instead of two.
func WithLegacyCompletionsUntil(until time.Time) Option {
	return func(s *Store) { s.legacyUntil = until }
}

// legacyOn reports whether records of older kits are read now.
func (s *Store) legacyOn() bool { return agentkit.LegacyCompletionsOn(s.legacyUntil, s.Now()) }

// Task is the entry's task as agentkit.Once names it: the tenant and
// idempotency key read from the dead message's headers, and its publish
// time. Every reader of completion records asks through it. An entry under
// the reserved tenant (its names broke the naming rule) is the task of the
// tenant its headers name (TaskTenant), which the kit recorded it under.
func (e *Entry) Task() agentkit.Task {
	tenant := e.Tenant
	if tenant == event.ReservedTenant && e.TaskTenant != "" {
		tenant = e.TaskTenant
	}
	return agentkit.Task{Tenant: tenant, Key: e.IdempotencyKey, PublishedAt: e.PublishedAt}
}

// Completion is a task-idempotency record as a lookup found it.
type Completion struct {
	// Done: the task completed (an in-progress claim is not done).
	Done bool
	// Legacy: an older kit's record (no tenant) answered, within the
	// migration window.
	Legacy   bool
	ExpireAt time.Time
	// seen is the record's update time, the precondition of a write that
	// relies on what was read (MarkRecoveredSeen).
	seen time.Time
}

// Note is the history note of e recovered because c shows its task
// completed.
func (c Completion) Note(e *Entry) string {
	n := "task-idempotency shows " + e.IdempotencyKey + " completed"
	if c.Legacy {
		n += " (an older agentkit's record, without tenant)"
	}
	return n
}

// Completion reads the completion record of e's task: Done is false when
// it has none, when it is only claimed, and when e has no idempotency key.
func (s *Store) Completion(ctx context.Context, e *Entry) (Completion, error) {
	found, err := s.Completions(ctx, []*Entry{e})
	return found[e.ID], err
}

// Completions reads the completion records of the entries' tasks, by entry
// id; entries without a key or a record are absent. One batched read, and a
// second for the tasks without a completed record while older kits'
// records are honoured.
func (s *Store) Completions(ctx context.Context, entries []*Entry) (map[string]Completion, error) {
	out := make(map[string]Completion, len(entries))
	var keyed []*Entry
	for _, e := range entries {
		if e.IdempotencyKey != "" {
			keyed = append(keyed, e)
		}
	}
	coll := s.fs.Collection(TaskIdempotency)
	err := s.readCompletions(ctx, keyed, func(e *Entry) *firestore.DocumentRef { return coll.Doc(e.Task().DocID()) },
		func(e *Entry, rec *agentkit.IdempotencyRecord, seen time.Time) {
			if rec.For(e.Task()) {
				out[e.ID] = Completion{Done: rec.Completed(), ExpireAt: rec.ExpireAt, seen: seen}
			}
		})
	if err != nil || !s.legacyOn() {
		return out, err
	}
	var open []*Entry
	for _, e := range keyed {
		if !out[e.ID].Done {
			open = append(open, e)
		}
	}
	err = s.readCompletions(ctx, open, func(e *Entry) *firestore.DocumentRef {
		return coll.Doc(agentkit.LegacyIdempotencyDocID(e.IdempotencyKey))
	},
		func(e *Entry, rec *agentkit.IdempotencyRecord, seen time.Time) {
			if rec.Legacy() && rec.For(e.Task()) && rec.Completed() {
				out[e.ID] = Completion{Done: true, Legacy: true, ExpireAt: rec.ExpireAt, seen: seen}
			}
		})
	return out, err
}

// readCompletions reads the record at ref(e) for each entry, 300 to a
// batch, and hands each one found to found.
func (s *Store) readCompletions(ctx context.Context, entries []*Entry, ref func(*Entry) *firestore.DocumentRef,
	found func(*Entry, *agentkit.IdempotencyRecord, time.Time)) error {
	for start := 0; start < len(entries); start += 300 {
		batch := entries[start:min(len(entries), start+300)]
		refs := make([]*firestore.DocumentRef, len(batch))
		for i, e := range batch {
			refs[i] = ref(e)
		}
		snaps, err := s.fs.GetAll(ctx, refs)
		s.read(len(refs))
		if err != nil {
			return fmt.Errorf("firestore get %d %s records: %w", len(refs), TaskIdempotency, err)
		}
		for i, snap := range snaps {
			if !snap.Exists() {
				continue
			}
			rec, err := decodeValue[agentkit.IdempotencyRecord](snap)
			if err != nil {
				return err
			}
			found(batch[i], rec, snap.UpdateTime)
		}
	}
	return nil
}

// KeepCompletion makes the completion record (agentkit.Once) of the entry's
// task last as long as the entry: agentkit keeps it 72 h, an entry may be
// kept for months (its policy's retention), and while the entry can be
// redriven the record is what tells replay, and the agent's Once, that the
// task is done. A record that lasts longer already, an in-progress claim or
// no record is left as it is; so calling it again changes nothing.
//
// An entry recovered through an older kit's record (Completion.Legacy)
// gets a record of its own tenant's, with that record's completion time:
// the decision outlasts the migration window, and the older record, which
// another tenant's task may share, is left alone.
func (s *Store) KeepCompletion(ctx context.Context, e *Entry) error {
	if e.IdempotencyKey == "" || e.ExpireAt.IsZero() {
		return nil
	}
	t := e.Task()
	coll := s.fs.Collection(TaskIdempotency)
	ref := coll.Doc(t.DocID())
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		own, err := txGet(s, tx, ref, "completion record", decodeValue[agentkit.IdempotencyRecord])
		switch {
		case err == nil:
			if !own.For(t) || !own.Completed() || !own.ExpireAt.Before(e.ExpireAt) {
				return nil
			}
			s.wrote(1)
			return tx.Update(ref, []firestore.Update{{Path: "expire_at", Value: e.ExpireAt}})
		case !errors.Is(err, ErrNotFound):
			return err
		case !s.legacyOn():
			return nil
		}
		// Read only when the task has no record of its own: one read
		// while the record lasts.
		old, err := txGet(s, tx, coll.Doc(agentkit.LegacyIdempotencyDocID(t.Key)), "completion record", decodeValue[agentkit.IdempotencyRecord])
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		case !old.Legacy() || !old.For(t) || !old.Completed():
			return nil
		}
		s.wrote(1)
		return tx.Set(ref, agentkit.IdempotencyRecord{Key: t.Key, Tenant: t.Tenant, Status: agentkit.StatusCompleted,
			Agent: old.Agent, CompletedAt: old.CompletedAt, ExpireAt: later(e.ExpireAt, old.ExpireAt)})
	})
	if err != nil {
		return txError("keep completion record of "+e.ID, err)
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// keepSeenCompletion is KeepCompletion for the record c the caller read
// (Completions): a write conditioned on the record being unchanged since,
// without reading it again; a record changed meanwhile is read again
// (KeepCompletion), and so is an older kit's, which gets a record of the
// entry's tenant in a transaction.
func (s *Store) keepSeenCompletion(ctx context.Context, e *Entry, c Completion) error {
	if e.IdempotencyKey == "" || e.ExpireAt.IsZero() || !c.Done || !c.ExpireAt.Before(e.ExpireAt) && !c.Legacy {
		return nil
	}
	if c.seen.IsZero() || c.Legacy {
		return s.KeepCompletion(ctx, e)
	}
	ref := s.fs.Collection(TaskIdempotency).Doc(e.Task().DocID())
	_, err := ref.Update(ctx, []firestore.Update{{Path: "expire_at", Value: e.ExpireAt}}, firestore.LastUpdateTime(c.seen))
	s.wrote(1)
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.FailedPrecondition, codes.NotFound:
		return s.KeepCompletion(ctx, e)
	}
	return fmt.Errorf("firestore keep completion record of %s: %w", e.ID, err)
}

// CountCompletions counts the completion records (agentkit.Once) whose
// completed_at is in [from, to): every tenant's, and those older kits
// wrote.
func (s *Store) CountCompletions(ctx context.Context, from, to time.Time) (int64, error) {
	q := s.fs.Collection(TaskIdempotency).Where("completed_at", ">=", from).Where("completed_at", "<", to)
	return s.count(ctx, q, TaskIdempotency)
}
