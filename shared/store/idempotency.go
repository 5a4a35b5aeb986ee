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
)

// This file reads task-idempotency: the completion records
// agentkit.Once writes, which say whether a dead task is done already.

// TaskCompleted reports whether task-idempotency holds a completion record
// (agentkit.Once) for an idempotency key. An in-progress claim is not a
// completion.
func (s *Store) TaskCompleted(ctx context.Context, key string) (bool, error) {
	if key == "" {
		return false, nil
	}
	rec, err := getDoc(ctx, s, s.completionRef(key), "completion record", decodeValue[agentkit.IdempotencyRecord])
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return rec.Completed(), nil
}

func (s *Store) completionRef(key string) *firestore.DocumentRef {
	return s.fs.Collection(TaskIdempotency).Doc(agentkit.IdempotencyDocID(key))
}

// KeepCompletion makes the completion record (agentkit.Once) of the entry's
// task last as long as the entry: agentkit keeps it 72 h, an entry may be
// kept for months (its policy's retention), and while the entry can be
// redriven the record is what tells replay, and the agent's Once, that the
// task is done. A record that lasts longer already, an in-progress claim or
// no record is left as it is; so calling it again changes nothing.
func (s *Store) KeepCompletion(ctx context.Context, e *Entry) error {
	if e.IdempotencyKey == "" || e.ExpireAt.IsZero() {
		return nil
	}
	ref := s.completionRef(e.IdempotencyKey)
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		rec, err := txGet(s, tx, ref, "completion record", decodeValue[agentkit.IdempotencyRecord])
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !rec.Completed() || !rec.ExpireAt.Before(e.ExpireAt) {
			return nil
		}
		s.wrote(1)
		return tx.Update(ref, []firestore.Update{{Path: "expire_at", Value: e.ExpireAt}})
	})
	if err != nil {
		return txError("keep completion record of "+e.ID, err)
	}
	return nil
}

// CompletedKeys reports, for each idempotency key, whether task-idempotency
// holds its completion record (agentkit.Once); one batched read.
func (s *Store) CompletedKeys(ctx context.Context, keys []string) (map[string]bool, error) {
	found, err := s.Completions(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(found))
	for k, c := range found {
		out[k] = c.Done
	}
	return out, nil
}

// Completion is a task-idempotency record as a lookup found it.
type Completion struct {
	// Done: the task completed (an in-progress claim is not done).
	Done     bool
	ExpireAt time.Time
	// seen is the record's update time, the precondition of a write that
	// relies on what was read (MarkRecoveredSeen).
	seen time.Time
}

// Completions reads the task-idempotency records (agentkit.Once) of the
// keys; one batched read. Keys without a record are absent.
func (s *Store) Completions(ctx context.Context, keys []string) (map[string]Completion, error) {
	out := make(map[string]Completion, len(keys))
	var refs []*firestore.DocumentRef
	var refKeys []string
	for _, k := range keys {
		if k == "" {
			continue
		}
		refs = append(refs, s.completionRef(k))
		refKeys = append(refKeys, k)
	}
	for start := 0; start < len(refs); start += 300 {
		end := min(len(refs), start+300)
		snaps, err := s.fs.GetAll(ctx, refs[start:end])
		s.read(end - start)
		if err != nil {
			return nil, fmt.Errorf("firestore get %d %s records: %w", end-start, TaskIdempotency, err)
		}
		for i, snap := range snaps {
			if !snap.Exists() {
				continue
			}
			rec, err := decodeValue[agentkit.IdempotencyRecord](snap)
			if err != nil {
				return nil, err
			}
			out[refKeys[start+i]] = Completion{Done: rec.Completed(), ExpireAt: rec.ExpireAt, seen: snap.UpdateTime}
		}
	}
	return out, nil
}

// keepSeenCompletion is KeepCompletion for the record c the caller read
// (Completions): a write conditioned on the record being unchanged since,
// without reading it again; a record changed meanwhile is read again
// (KeepCompletion).
func (s *Store) keepSeenCompletion(ctx context.Context, e *Entry, c Completion) error {
	if e.IdempotencyKey == "" || e.ExpireAt.IsZero() || !c.Done || !c.ExpireAt.Before(e.ExpireAt) {
		return nil
	}
	if c.seen.IsZero() {
		return s.KeepCompletion(ctx, e)
	}
	ref := s.completionRef(e.IdempotencyKey)
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
// completed_at is in [from, to).
func (s *Store) CountCompletions(ctx context.Context, from, to time.Time) (int64, error) {
	q := s.fs.Collection(TaskIdempotency).Where("completed_at", ">=", from).Where("completed_at", "<", to)
	return s.count(ctx, q, TaskIdempotency)
}
