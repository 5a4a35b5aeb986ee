package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/agentkit"
)

// This file holds the store operations of the replay function and the
// operator actions (shared/operator): tenant-scoped transitions with payload
// edits, recovery and the idempotency lookup.

// AllTenants is the scope of an operator who may act on every tenant.
const AllTenants = ""

// ApprovalNote starts the history note of an operator's approval
// (shared/operator). A replay scheduled by an approval skips the policy and
// breaker checks: a human decided on exactly this replay.
const ApprovalNote = "approved"

// Approved reports whether the entry's latest move into scheduled was an
// approval. Scheduled -> scheduled notes (a "replay now") are not moves.
func (e *Entry) Approved() bool {
	for i := len(e.History) - 1; i >= 0; i-- {
		t := e.History[i]
		if t.To != string(Scheduled) {
			continue
		}
		if strings.HasPrefix(t.Note, ApprovalNote) {
			return true
		}
		if t.From != string(Scheduled) {
			return false
		}
	}
	return false
}

// LoadPayload fills e.Payload from its chunks (entries read with GetMeta or
// returned by Transition) and verifies its sha256. A missing payload is not
// an error here: e.PayloadMissing tells.
func (s *Store) LoadPayload(ctx context.Context, e *Entry) error {
	if e.PayloadMissing {
		return nil
	}
	return s.loadPayload(ctx, e)
}

// TransitionScoped is Transition for a caller scoped to one tenant (tenant
// AllTenants: any). An entry of another tenant is ErrNotFound, decided before
// its status is looked at, so a scoped caller learns nothing about it.
//
// A non-nil payload replaces the entry's payload in the same transaction
// (chunks above InlinePayload are written first, under content-derived ids,
// so a retried or abandoned edit leaves only orphans that expire); the entry
// is no longer payload_missing afterwards. The returned entry carries the
// new payload, or the inline one.
func (s *Store) TransitionScoped(ctx context.Context, id, tenant string, c Change, payload []byte) (*Entry, error) {
	var staged *Entry
	if payload != nil {
		if len(payload) > MaxPayload {
			return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(payload), MaxPayload)
		}
		staged = &Entry{Payload: payload, PayloadSHA256: PayloadSum(payload), PayloadSize: int64(len(payload)), ExpireAt: s.Now().Add(Retention)}
		if len(payload) > InlinePayload {
			if err := s.writeChunks(ctx, id, staged); err != nil {
				return nil, err
			}
		}
	}
	var out *Entry
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(s.entryRef(id))
		s.read(1)
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("%w: entry %q", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		e, err := decodeEntry(snap)
		if err != nil {
			return err
		}
		if tenant != AllTenants && e.Tenant != tenant {
			return fmt.Errorf("%w: entry %q", ErrNotFound, id)
		}
		if !slices.Contains(c.From, e.Status) {
			return fmt.Errorf("%w: entry %q is %s, want one of %v", ErrWrongStatus, id, e.Status, c.From)
		}
		note := c.Note
		if staged != nil {
			old := "missing"
			if !e.PayloadMissing {
				old = fmt.Sprintf("%d B sha256 %s", e.PayloadSize, e.PayloadSHA256)
			}
			note += fmt.Sprintf("; payload edited: %s -> %d B sha256 %s", old, staged.PayloadSize, staged.PayloadSHA256)
			e.Payload, e.PayloadChunkCount = staged.Payload, staged.PayloadChunkCount
			if len(staged.Payload) > InlinePayload {
				e.Payload = nil
			}
			e.PayloadSHA256, e.PayloadSize = staged.PayloadSHA256, staged.PayloadSize
			e.PayloadMissing, e.PayloadTruncated = false, false
		}
		if c.Apply != nil {
			if err := c.Apply(e); err != nil {
				return err
			}
		}
		now := s.Now()
		e.History = appendHistory(e.History, Transition{At: now, From: string(e.Status), To: string(c.To), By: c.By, Note: note})
		e.Status = c.To
		e.UpdatedAt = now
		if c.To.Terminal() || c.To == Escalated || c.To == Quarantined {
			e.ResolvedAt = now
		} else {
			e.ResolvedAt = time.Time{}
		}
		out = e
		if c.Count != nil {
			hour := Hour(now)
			s.wrote(1)
			if err := tx.Set(s.shardRef(hour, id), c.Count.updates(hour), firestore.MergeAll); err != nil {
				return err
			}
		}
		s.wrote(1)
		return tx.Set(s.entryRef(id), e)
	})
	if err != nil {
		return nil, txError("transition "+id, err)
	}
	if staged != nil {
		out.Payload = staged.Payload
	}
	return out, nil
}

// TaskCompleted reports whether task-idempotency holds a completion record
// (agentkit.Once) for an idempotency key. An in-progress claim is not a
// completion.
func (s *Store) TaskCompleted(ctx context.Context, key string) (bool, error) {
	if key == "" {
		return false, nil
	}
	snap, err := s.fs.Collection(TaskIdempotency).Doc(agentkit.IdempotencyDocID(key)).Get(ctx)
	s.read(1)
	if status.Code(err) == codes.NotFound {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("firestore get %s/%s: %w", TaskIdempotency, agentkit.IdempotencyDocID(key), err)
	}
	var rec agentkit.IdempotencyRecord
	if err := snap.DataTo(&rec); err != nil {
		return false, fmt.Errorf("decode %s/%s: %w", TaskIdempotency, snap.Ref.ID, err)
	}
	return rec.Status == agentkit.StatusCompleted || !rec.CompletedAt.IsZero(), nil
}

// MarkRecovered moves an entry from one of from to recovered, counting it
// in the hour's replays_recovered in the same transaction, and, when the entry is its tenant breaker's
// half-open probe, reports the probe recovered, which closes the breaker.
//
// It is safe to repeat: an entry that is recovered already is not counted
// again, but its probe report is repeated (the report comes after the
// transition, so a caller whose report failed retries until it succeeds).
func (s *Store) MarkRecovered(ctx context.Context, id string, from []Status, by, note string) (*Entry, error) {
	e, err := s.Transition(ctx, id, Change{From: from, To: Recovered, By: by, Note: note, Count: &Metrics{ReplaysRecovered: 1}})
	if errors.Is(err, ErrWrongStatus) {
		cur, gerr := s.GetMeta(ctx, id)
		if gerr != nil || cur.Status != Recovered {
			return nil, err
		}
		e = cur
	} else if err != nil {
		return nil, err
	}
	if e.BreakerProbe {
		if _, err := s.BreakerProbeResult(ctx, e.Tenant, e.ID, true, by); err != nil {
			return e, fmt.Errorf("entry %s recovered; breaker probe result not recorded: %w", id, err)
		}
	}
	return e, nil
}

// ReleaseProbe reports a half-open probe that will not be replayed (its
// entry was held back, escalated or sent for approval) as failed: the breaker
// reopens and picks a new probe after its cooldown, instead of waiting
// forever for a replay that is not coming. Entries that are not the probe
// change nothing.
func (s *Store) ReleaseProbe(ctx context.Context, e *Entry, by string) error {
	if !e.BreakerProbe {
		return nil
	}
	_, err := s.BreakerProbeResult(ctx, e.Tenant, e.ID, false, by)
	return err
}
