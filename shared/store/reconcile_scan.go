package store

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/agentkit"
)

// This file holds the read paths of the reconcile function: paged scans of
// failure-log that a run can stop and resume, batch lookups and counts.

// scanFields are the entry fields an audit reads. Scans project onto them so
// that paging through thousands of entries never downloads inline payloads
// (up to 256 KiB each).
var scanFields = []string{
	"event_id", "stream", "consumer", "stream_seq", "subject", "tenant", "agent", "task_id", "task_type",
	"idempotency_key", "kind", "category", "reason_code", "action", "strategy", "status", "replays",
	"next_retry_at", "task_name", "breaker_probe", "published_seq", "replay_of", "root_id", "history",
	"created_at", "updated_at", "resolved_at",
}

// PageCursor is where a paged scan stopped: the order field's value and the
// document id of the last entry returned. The zero cursor starts at the top.
type PageCursor struct {
	At time.Time `firestore:"at" json:"at"`
	ID string    `firestore:"id" json:"id"`
}

// IsZero reports whether the cursor is at the start.
func (c PageCursor) IsZero() bool { return c.ID == "" }

func (s *Store) page(ctx context.Context, q firestore.Query, field string, after PageCursor, limit int) ([]*Entry, PageCursor, error) {
	q = q.Select(scanFields...).OrderBy(field, firestore.Asc).OrderBy(firestore.DocumentID, firestore.Asc)
	if !after.IsZero() {
		q = q.StartAfter(after.At, after.ID)
	}
	snaps, err := q.Limit(limit).Documents(ctx).GetAll()
	s.read(max(1, len(snaps)))
	if err != nil {
		return nil, after, fmt.Errorf("firestore scan %s by %s: %w", FailureLog, field, err)
	}
	out := make([]*Entry, 0, len(snaps))
	next := after
	for _, snap := range snaps {
		e, err := decodeEntry(snap)
		if err != nil {
			return nil, after, err
		}
		out = append(out, e)
		next = PageCursor{ID: e.ID, At: e.CreatedAt}
		if field == "next_retry_at" {
			next.At = e.NextRetryAt
		}
	}
	return out, next, nil
}

// ScanStatus returns up to limit entries in status st after the cursor,
// ordered by next_retry_at then id (index status + next_retry_at), without
// payloads, and the cursor of the last one.
func (s *Store) ScanStatus(ctx context.Context, st Status, after PageCursor, limit int) ([]*Entry, PageCursor, error) {
	q := s.fs.Collection(FailureLog).Where("status", "==", string(st))
	return s.page(ctx, q, "next_retry_at", after, limit)
}

// ScanCreated returns up to limit entries created in [from, to) after the
// cursor, ordered by created_at then id, without payloads, and the cursor of
// the last one.
func (s *Store) ScanCreated(ctx context.Context, from, to time.Time, after PageCursor, limit int) ([]*Entry, PageCursor, error) {
	q := s.fs.Collection(FailureLog).Where("created_at", ">=", from).Where("created_at", "<", to)
	return s.page(ctx, q, "created_at", after, limit)
}

// CountCreated counts the entries created in [from, to) with one aggregation
// query (billed as one read per 1 000 entries counted).
func (s *Store) CountCreated(ctx context.Context, from, to time.Time) (int64, error) {
	q := s.fs.Collection(FailureLog).Where("created_at", ">=", from).Where("created_at", "<", to)
	return s.count(ctx, q, FailureLog)
}

func (s *Store) count(ctx context.Context, q firestore.Query, what string) (int64, error) {
	res, err := q.NewAggregationQuery().WithCount("n").Get(ctx)
	s.read(1)
	if err != nil {
		return 0, fmt.Errorf("firestore count %s: %w", what, err)
	}
	switch v := res["n"].(type) {
	case int64:
		return v, nil
	case interface{ GetIntegerValue() int64 }:
		return v.GetIntegerValue(), nil
	}
	return 0, fmt.Errorf("firestore count %s: unexpected result %T", what, res["n"])
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

// CompletedKeys reports, for each idempotency key, whether task-idempotency
// holds its completion record (agentkit.Once); one batched read.
func (s *Store) CompletedKeys(ctx context.Context, keys []string) (map[string]bool, error) {
	out := make(map[string]bool, len(keys))
	var refs []*firestore.DocumentRef
	var refKeys []string
	for _, k := range keys {
		if k == "" {
			continue
		}
		refs = append(refs, s.fs.Collection(TaskIdempotency).Doc(agentkit.IdempotencyDocID(k)))
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
			var rec agentkit.IdempotencyRecord
			if err := snap.DataTo(&rec); err != nil {
				return nil, fmt.Errorf("decode %s/%s: %w", TaskIdempotency, snap.Ref.ID, err)
			}
			out[refKeys[start+i]] = rec.Status == agentkit.StatusCompleted || !rec.CompletedAt.IsZero()
		}
	}
	return out, nil
}

// CountCompletions counts the completion records (agentkit.Once) whose
// completed_at is in [from, to).
func (s *Store) CountCompletions(ctx context.Context, from, to time.Time) (int64, error) {
	q := s.fs.Collection(TaskIdempotency).Where("completed_at", ">=", from).Where("completed_at", "<", to)
	return s.count(ctx, q, TaskIdempotency)
}

// ListBreakers returns up to limit tenant breakers in one of states.
func (s *Store) ListBreakers(ctx context.Context, states []string, limit int) ([]*Breaker, error) {
	snaps, err := s.fs.Collection(Breakers).Where("state", "in", states).Limit(limit).Documents(ctx).GetAll()
	s.read(max(1, len(snaps)))
	if err != nil {
		return nil, fmt.Errorf("firestore query %s: %w", Breakers, err)
	}
	out := make([]*Breaker, 0, len(snaps))
	for _, snap := range snaps {
		b, err := decodeBreaker(snap, "")
		if err != nil {
			return nil, err
		}
		if b.Tenant == "" {
			if b.Tenant, err = EventID(snap.Ref.ID); err != nil {
				b.Tenant = snap.Ref.ID
			}
		}
		out = append(out, b)
	}
	return out, nil
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

func reconcileNotFound(err error) bool { return status.Code(err) == codes.NotFound }
