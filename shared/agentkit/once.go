package agentkit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Fields of a task-idempotency document. A document with completed_at is a
// completed task (what replay and reconcile look for); one with status
// in_progress is a claim.
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
)

// IdempotencyRecord is a task-idempotency/{IdempotencyDocID(key)} document.
type IdempotencyRecord struct {
	Key         string    `firestore:"key"`
	Status      string    `firestore:"status"`
	Agent       string    `firestore:"agent,omitempty"`
	Owner       string    `firestore:"owner,omitempty"`
	ClaimedAt   time.Time `firestore:"claimed_at,omitempty"`
	LeaseUntil  time.Time `firestore:"lease_until,omitempty"`
	CompletedAt time.Time `firestore:"completed_at,omitempty"`
	// ExpireAt drives the collection's TTL policy: 72 h after completion,
	// or after the claim (an abandoned claim is cleaned up too).
	ExpireAt time.Time `firestore:"expire_at"`
}

// Completed reports whether the record says the task is done: an
// in-progress claim is not.
func (r IdempotencyRecord) Completed() bool {
	return r.Status == StatusCompleted || !r.CompletedAt.IsZero()
}

// IdempotencyDocID maps an idempotency key to its document id. Keys that are
// valid Firestore ids are used as they are (readable in the console); others
// (containing '/', "." or "..", __x__, or over 1 500 bytes) become
// "sha256-<hex>". Replay and reconcile use the same mapping.
func IdempotencyDocID(key string) string {
	if key != "" && key != "." && key != ".." && !strings.Contains(key, "/") && len(key) <= 1500 &&
		!(strings.HasPrefix(key, "__") && strings.HasSuffix(key, "__")) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// Once runs fn at most once per key across redeliveries, replays and
// concurrent duplicates, and reports whether it ran:
//
//   - completed before: fn does not run; (false, nil) — ack the message;
//   - claimed by another live attempt: (false, ErrInProgress) — NAK with a
//     delay and let the redelivery find it completed;
//   - otherwise Once claims the key in a transaction (create-if-absent or
//     take over an expired claim), runs fn, and records completion
//     (completed_at, expire_at = +72 h) before returning (true, nil): the
//     caller acks after that, so a crash between the two redelivers a
//     task already recorded done, which Once then skips.
//
// If fn fails, the claim is released and fn's error returned; the next
// delivery runs fn again.
//
// fn can run twice for one key in exactly these cases: the process dies (or
// loses Firestore) after fn's side effects but before the completion write,
// and a redelivery arrives after the claim's lease expired; or fn runs longer
// than the lease and a duplicate takes the claim over meanwhile. Size the
// lease (WithLease) above the longest fn. Side effects that must never
// repeat need their own idempotency key downstream.
func (k *Kit) Once(ctx context.Context, key string, fn func(context.Context) error) (ran bool, err error) {
	if k.fs == nil {
		return false, ErrNoFirestore
	}
	if key == "" {
		return false, errors.New("agentkit: Once needs a key")
	}
	ref := k.fs.Collection(k.collection).Doc(IdempotencyDocID(key))
	owner := newOwner()
	done := false
	err = k.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		done = false
		now := k.now().UTC()
		cur, found, err := readIdempotency(tx, ref)
		if err != nil {
			return err
		}
		if found && cur.Completed() {
			done = true
			return nil
		}
		if found && cur.LeaseUntil.After(now) {
			return ErrInProgress
		}
		return tx.Set(ref, IdempotencyRecord{Key: key, Status: StatusInProgress, Agent: k.agent, Owner: owner,
			ClaimedAt: now, LeaseUntil: now.Add(k.lease), ExpireAt: now.Add(k.ttl)})
	})
	switch {
	case errors.Is(err, ErrInProgress):
		return false, fmt.Errorf("key %q: %w", key, ErrInProgress)
	case err != nil:
		return false, fmt.Errorf("agentkit: claim %q: %w", key, err)
	case done:
		return false, nil
	}
	if err := fn(ctx); err != nil {
		if rerr := k.release(context.WithoutCancel(ctx), ref, owner); rerr != nil {
			k.log.Warn("could not release idempotency claim; it expires with its lease", "key", key, "error", rerr)
		}
		return true, err
	}
	now := k.now().UTC()
	_, err = ref.Set(context.WithoutCancel(ctx), IdempotencyRecord{Key: key, Status: StatusCompleted, Agent: k.agent,
		Owner: owner, CompletedAt: now, ExpireAt: now.Add(k.ttl)})
	if err != nil {
		return true, fmt.Errorf("agentkit: record completion of %q (do not ack; the claim expires in %s): %w", key, k.lease, err)
	}
	return true, nil
}

// release deletes the claim if it is still ours.
func (k *Kit) release(ctx context.Context, ref *firestore.DocumentRef, owner string) error {
	return k.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		cur, found, err := readIdempotency(tx, ref)
		if err != nil || !found || cur.Owner != owner || cur.Status != StatusInProgress {
			return err
		}
		return tx.Delete(ref)
	})
}

// readIdempotency reads the record at ref in tx; found is false when the
// key has none (never claimed, released, or expired).
func readIdempotency(tx *firestore.Transaction, ref *firestore.DocumentRef) (rec IdempotencyRecord, found bool, err error) {
	snap, err := tx.Get(ref)
	if status.Code(err) == codes.NotFound {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if err := snap.DataTo(&rec); err != nil {
		return rec, false, fmt.Errorf("decode %s: %w", ref.Path, err)
	}
	return rec, true, nil
}

func newOwner() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
