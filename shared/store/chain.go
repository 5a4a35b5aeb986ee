package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A replay that dies again is a new entry linked to the one it replays
// (LinkReplay): the chain carries the task on. The parent stays replayed,
// and its task is the new entry's. Reconcile looks for a replayed entry's
// completion when its check is due (next_retry_at); checking a parent
// whose replay died would cost two reads a check for as long as it is
// kept, to learn what its chain learns anyway. So the parent's check is
// handed to the chain, and a recovery recovers the chain.

// ChainCheckMargin is how long before it expires a parent whose check was
// handed to its chain is checked once more: only a recovery whose walk up
// the chain failed midway is left for that check to find.
const ChainCheckMargin = 24 * time.Hour

// maxChainWalk bounds the walk up a chain; the policy ends a chain long
// before (its poison rule counts five failures).
const maxChainWalk = 32

// ErrChainTooLong reports a recovery whose walk up its replay chain stopped
// at maxChainWalk entries: the entry is recovered, and the ancestors past
// the bound are left to their last check (ChainCheckMargin). Repeating the
// call cannot help.
var ErrChainTooLong = errors.New("store: replay chain longer than a recovery walks")

// sameTask reports whether child, linked to parent, carries parent's task
// on: the same tenant, and the same idempotency key where both have one
// (a forged or stale link starts a new chain instead).
func sameTask(parent, child *Entry) bool {
	return parent.Tenant == child.Tenant &&
		(parent.IdempotencyKey == "" || child.IdempotencyKey == "" || parent.IdempotencyKey == child.IdempotencyKey)
}

// handOffCheck puts the completion check of parent, as LinkReplay read it,
// off to ChainCheckMargin before parent expires, once child (as stored) is
// linked to it and parent is replayed: a write conditioned on parent being
// unchanged since (DeferCheck), so it reads nothing and a parent that moved
// meanwhile keeps its schedule. A parent that changed but is still replayed
// (reconcile's own check put it off meanwhile, usually) is read once more
// and tried again; one that changes again is reported (ErrConflict). It is
// the same write on every call.
func (s *Store) handOffCheck(ctx context.Context, parent, child *Entry) error {
	for try := 0; ; try++ {
		if parent == nil || child == nil || child.ReplayOf != parent.ID || parent.Status != Replayed || parent.ExpireAt.IsZero() {
			return nil
		}
		at := parent.ExpireAt.Add(-ChainCheckMargin)
		if !at.After(parent.NextRetryAt) {
			return nil
		}
		deferred, err := s.DeferCheck(ctx, parent, at)
		switch {
		case err != nil:
			return fmt.Errorf("hand the check of %s to %s: %w", parent.ID, child.ID, err)
		case deferred:
			return nil
		case try > 0:
			return fmt.Errorf("hand the check of %s to %s: %w: it changed again while handed off", parent.ID, child.ID, ErrConflict)
		}
		parent, err = s.GetMeta(ctx, parent.ID)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("hand the check of %s to %s: %w", child.ReplayOf, child.ID, err)
		}
	}
}

// recoverChain recovers the replayed entries e replays, e recovered: the
// chain's task completed. Each is read once and moved on condition that it
// is unchanged since. Its completion record is kept as long as it is, which
// reads the record only where e's keeping (or an ancestor's) did not
// already cover it: another key, or an entry kept longer (its category's
// retention).
func (s *Store) recoverChain(ctx context.Context, e *Entry, by string) error {
	// Each ancestor must carry e's task, not only its child's: a keyless
	// link in the middle would otherwise join two tasks.
	task := *e
	child := e
	keptKey, keptUntil := e.IdempotencyKey, e.ExpireAt
	keep := func(ctx context.Context, p *Entry) error {
		if p.IdempotencyKey == keptKey && !p.ExpireAt.After(keptUntil) {
			return nil
		}
		if err := s.KeepCompletion(ctx, p); err != nil || p.IdempotencyKey == "" {
			return err
		}
		keptKey, keptUntil = p.IdempotencyKey, p.ExpireAt
		return nil
	}
	for range maxChainWalk {
		if child.ReplayOf == "" {
			return nil
		}
		p, err := s.GetMeta(ctx, child.ReplayOf)
		switch {
		case errors.Is(err, ErrNotFound):
			// Its TTL deleted it, and its link went with it.
			return nil
		case err != nil:
			return fmt.Errorf("replay chain of %s: %w", e.ID, err)
		case !sameTask(p, child), !sameTask(p, &task):
			return nil
		}
		if task.IdempotencyKey == "" {
			task.IdempotencyKey = p.IdempotencyKey
		}
		if p.Status == Replayed {
			note := "its replay chain recovered (" + e.ID + ")"
			_, err := s.recoverOne(ctx, p.ID, func(c Change) (*Entry, error) { return s.TransitionSeen(ctx, p, c) }, MoveRecover.Only(Replayed), by, note, keep)
			switch {
			case errors.Is(err, ErrNotFound):
				// Expired since it was read; an ancestor kept longer
				// (another category's retention) may still be there.
			case err != nil && !errors.Is(err, ErrWrongStatus):
				// (An entry moved on meanwhile, an operator's decision, is
				// left as it is.)
				return fmt.Errorf("replay chain of %s: %w", e.ID, err)
			}
		}
		child = p
	}
	if child.ReplayOf == "" {
		return nil
	}
	return fmt.Errorf("replay chain of %s: %w (%d entries walked, %s not)", e.ID, ErrChainTooLong, maxChainWalk, child.ReplayOf)
}
