package agentkit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
)

// Fields of a task-idempotency document. A document with completed_at is a
// completed task (what replay and reconcile look for); one with status
// in_progress is a claim.
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
)

// Task names a task for Once and for the readers of its completion record
// (replay, reconcile): the tenant it belongs to and its idempotency key. Two
// tenants' tasks with the same key are two tasks, each with its own record.
type Task struct {
	// Tenant is the message's tenant as event.Conventions.Tenant reads it
	// (X-Tenant-ID trimmed, "default" when absent).
	Tenant string
	// Key is the task's idempotency key (IdempotencyKey).
	Key string
	// PublishedAt is when the task's message was published to its stream:
	// a record an older kit wrote (no tenant) speaks for this task only if
	// it was written at or after it (IdempotencyRecord.For). Zero: unknown,
	// and such records are not honoured.
	PublishedAt time.Time
	// Msg is the delivery Once keeps alive while fn runs (in-progress
	// acks at the keep-alive interval, WithKeepAlive); nil: Once renews
	// the claim only, at DefaultKeepAlive unless WithKeepAlive says.
	Msg jetstream.Msg
}

// TaskOf is the task msg carries: its tenant, its idempotency key, its
// publish time (the stream's timestamp) and msg itself, to keep alive. Key
// is "" when msg carries none; an agent that keys its work otherwise sets
// Key itself.
func TaskOf(msg jetstream.Msg) Task {
	h := msg.Headers()
	t := Task{Tenant: event.DefaultConventions.Tenant(h), Key: event.DefaultConventions.IdempotencyKey(h), Msg: msg}
	if md, err := msg.Metadata(); err == nil {
		t.PublishedAt = md.Timestamp
	}
	return t
}

// ErrInvalidTask: Once was given a task it cannot record (no key or
// tenant, text that is not UTF-8, or spaces the server trims away).
var ErrInvalidTask = errors.New("agentkit: invalid task")

// check refuses a task whose record the server would never find: the
// readers name the task as event.Conventions reads it from the headers,
// trimmed and never empty, and Firestore stores only UTF-8 strings.
func (t Task) check() error {
	for _, f := range []struct{ name, v string }{{"tenant", t.Tenant}, {"key", t.Key}} {
		switch {
		case f.v == "":
			return fmt.Errorf("%w: no %s (agentkit.TaskOf reads it from the message)", ErrInvalidTask, f.name)
		case !utf8.ValidString(f.v):
			return fmt.Errorf("%w: %s %q is not UTF-8", ErrInvalidTask, f.name, f.v)
		case strings.TrimSpace(f.v) != f.v:
			return fmt.Errorf("%w: %s %q has leading or trailing space, which the server trims", ErrInvalidTask, f.name, f.v)
		}
	}
	return nil
}

// DocID is the id of t's record: IdempotencyDocID(t.Tenant, t.Key).
func (t Task) DocID() string { return IdempotencyDocID(t.Tenant, t.Key) }

// IdempotencyRecord is a task-idempotency/{IdempotencyDocID(tenant, key)}
// document, or one an older kit wrote at LegacyIdempotencyDocID(key)
// (Tenant empty).
type IdempotencyRecord struct {
	Key        string    `firestore:"key"`
	Tenant     string    `firestore:"tenant,omitempty"`
	Status     string    `firestore:"status"`
	Agent      string    `firestore:"agent,omitempty"`
	Owner      string    `firestore:"owner,omitempty"`
	ClaimedAt  time.Time `firestore:"claimed_at,omitempty"`
	LeaseUntil time.Time `firestore:"lease_until,omitempty"`
	// RenewedAt is the claim's last renewal (absent until the first).
	RenewedAt   time.Time `firestore:"renewed_at,omitempty"`
	CompletedAt time.Time `firestore:"completed_at,omitempty"`
	// ExpireAt drives the collection's TTL policy: 72 h after completion,
	// or after the claim's last renewal (an abandoned claim is cleaned up
	// too).
	ExpireAt time.Time `firestore:"expire_at"`
}

// Completed reports whether the record says the task is done: an
// in-progress claim is not.
func (r IdempotencyRecord) Completed() bool {
	return r.Status == StatusCompleted || !r.CompletedAt.IsZero()
}

// Legacy reports whether an older kit wrote the record: it names no tenant.
func (r IdempotencyRecord) Legacy() bool { return r.Tenant == "" }

// For reports whether the record speaks for t. A record of this kit does
// when it names t's tenant and key. A record an older kit wrote names no
// tenant, so any tenant's task with the key may have written it; it speaks
// for t only when it was written (completed, or else claimed) at or after
// t was published: a record written before t existed belongs to another
// task, another tenant's or an earlier one. A record written after t was
// published by another tenant's task with the same key cannot be told
// apart (docs/contracts.md, "Completion records before tenant scoping").
func (r IdempotencyRecord) For(t Task) bool {
	if r.Key != t.Key {
		return false
	}
	if !r.Legacy() {
		return r.Tenant == t.Tenant
	}
	written := r.CompletedAt
	if written.IsZero() {
		written = r.ClaimedAt
	}
	return !t.PublishedAt.IsZero() && !written.IsZero() && !written.Before(t.PublishedAt)
}

// IdempotencyDocID is the id of the completion record of tenant's task with
// key: "tenant-sha256-" and the hex SHA-256 of the tenant's length in bytes
// (decimal), ":", the tenant and the key. The length prefix makes it
// injective (tenant "a" with key "bc" and tenant "ab" with key "c" differ),
// the hash keeps it a valid Firestore id of fixed length whatever the
// tenant and key hold, and the prefix keeps it apart from the ids of older
// kits. The TypeScript kit computes the same id; replay, reconcile and the
// store use this function.
func IdempotencyDocID(tenant, key string) string {
	sum := sha256.Sum256([]byte(strconv.Itoa(len(tenant)) + ":" + tenant + key))
	return scopedIDPrefix + hex.EncodeToString(sum[:])
}

const scopedIDPrefix = "tenant-sha256-"

// LegacyIdempotencyDocID is the id older kits gave the record of key, for
// any tenant: the key itself when it is a valid Firestore id, else
// "sha256-<hex>" (a key containing '/', "." or "..", __x__, or over 1 500
// bytes). Read while the migration window lasts (WithLegacyCompletionsUntil);
// never written.
func LegacyIdempotencyDocID(key string) string {
	if key != "" && key != "." && key != ".." && !strings.Contains(key, "/") && len(key) <= 1500 &&
		!(strings.HasPrefix(key, "__") && strings.HasSuffix(key, "__")) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// LegacyCompletionsOn reports whether records older kits wrote are still
// read at now, the window ending at until (zero: no end set).
func LegacyCompletionsOn(until, now time.Time) bool { return until.IsZero() || now.Before(until) }

// Once runs fn at most once per task (tenant and key) across redeliveries,
// replays and concurrent duplicates, and reports whether it ran:
//
//   - completed before: fn does not run; (false, nil) — ack the message;
//   - claimed by another live attempt: (false, ErrInProgress) — NAK with a
//     delay and let the redelivery find it completed;
//   - otherwise Once claims the task in a transaction (create-if-absent or
//     take over an expired claim), runs fn while keeping it alive, and
//     records completion (completed_at, expire_at = +72 h) in a transaction
//     that checks the claim is still this attempt's, before returning
//     (true, nil): the caller acks after that, so a crash between the two
//     redelivers a task already recorded done, which Once then skips.
//
// While fn runs, one timer every keep-alive interval (WithKeepAlive: by
// default half the delivery's ack deadline) sends t.Msg's in-progress ack,
// so the server does not redeliver a task that outlives its AckWait, and
// renews the claim's lease (LeaseIntervals intervals, or WithLease) in a
// transaction that checks the claim is still this attempt's. A renewal that
// finds the claim taken over or completed by another attempt, or that has
// failed until the lease ran out, cancels fn's context and Once returns
// (true, ErrClaimLost): nothing is recorded, and the message must be
// neither acked nor NAKed (ErrClaimLost says why).
//
// Get t from the message with TaskOf. Two tenants' tasks with the same key
// each run: the record is the tenant's. While the migration window lasts
// (WithLegacyCompletionsUntil), a completion or a live claim an older kit
// recorded under the key alone counts too, when IdempotencyRecord.For says
// it speaks for t: so a task an older kit completed, redelivered to this
// one during a rolling upgrade, is not run again.
//
// If fn fails, the claim is released and fn's error returned; the next
// delivery runs fn again.
//
// A task longer than the lease no longer runs twice: its claim is renewed
// as long as fn runs. fn can run twice for one task only when the process
// dies (or loses Firestore for the whole lease) after fn's side effects but
// before the completion write: the claim then lapses and a redelivery runs
// fn again. Side effects that must never repeat need their own idempotency
// key downstream.
func (k *Kit) Once(ctx context.Context, t Task, fn func(context.Context) error) (ran bool, err error) {
	if k.fs == nil {
		return false, ErrNoFirestore
	}
	if err := t.check(); err != nil {
		return false, err
	}
	interval := k.interval(ctx, t.Msg)
	c := &claim{kit: k, task: t, lease: k.leaseFor(interval), ref: k.fs.Collection(k.collection).Doc(t.DocID())}
	done, err := c.take(ctx)
	switch {
	case errors.Is(err, ErrInProgress):
		return false, fmt.Errorf("tenant %q key %q: %w", t.Tenant, t.Key, ErrInProgress)
	case err != nil:
		return false, fmt.Errorf("agentkit: claim tenant %q key %q: %w", t.Tenant, t.Key, err)
	case done:
		return false, nil
	}
	err = k.keepAliveRun(ctx, t.Msg, interval, c.renew, fn)
	switch {
	case errors.Is(err, ErrClaimLost):
		return true, fmt.Errorf("tenant %q key %q: %w", t.Tenant, t.Key, err)
	case err != nil:
		if rerr := c.release(context.WithoutCancel(ctx)); rerr != nil {
			k.log.Warn("could not release idempotency claim; it expires with its lease", "tenant", event.Wire(t.Tenant), "key", event.Wire(t.Key), "error", rerr)
		}
		return true, err
	}
	if err := c.complete(context.WithoutCancel(ctx)); err != nil {
		if errors.Is(err, ErrClaimLost) {
			return true, fmt.Errorf("tenant %q key %q: %w", t.Tenant, t.Key, err)
		}
		return true, fmt.Errorf("agentkit: record completion of tenant %q key %q (do not ack; the claim expires in %s): %w",
			t.Tenant, t.Key, c.lease, err)
	}
	return true, nil
}

// claim is one attempt's claim on a task: the record it wrote (rec) at ref.
type claim struct {
	kit   *Kit
	task  Task
	lease time.Duration
	ref   *firestore.DocumentRef
	rec   IdempotencyRecord
}

// take claims the task in a transaction, or reports it done (true) or held
// by a live claim (ErrInProgress). It reads the task's record and, while
// the migration window lasts, the one an older kit wrote under the key.
func (c *claim) take(ctx context.Context) (done bool, err error) {
	k := c.kit
	refs := []*firestore.DocumentRef{c.ref}
	if LegacyCompletionsOn(k.legacyUntil, k.now()) {
		refs = append(refs, c.ref.Parent.Doc(LegacyIdempotencyDocID(c.task.Key)))
	}
	owner := newOwner()
	err = k.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		done = false
		now := k.now().UTC()
		recs, err := readIdempotency(tx, refs)
		if err != nil {
			return err
		}
		for _, cur := range recs {
			if cur == nil || !cur.For(c.task) {
				continue
			}
			if cur.Completed() {
				done = true
				return nil
			}
			if cur.LeaseUntil.After(now) {
				return ErrInProgress
			}
		}
		c.rec = IdempotencyRecord{Key: c.task.Key, Tenant: c.task.Tenant, Status: StatusInProgress, Agent: k.agent, Owner: owner,
			ClaimedAt: now, LeaseUntil: now.Add(c.lease), ExpireAt: now.Add(k.ttl)}
		return tx.Set(c.ref, c.rec)
	})
	return done, err
}

// mine reads the record in tx and refuses with ErrClaimLost unless it is
// still this attempt's live claim.
func (c *claim) mine(tx *firestore.Transaction) error {
	recs, err := readIdempotency(tx, []*firestore.DocumentRef{c.ref})
	if err != nil {
		return err
	}
	switch cur := recs[0]; {
	case cur == nil:
		return fmt.Errorf("%w: its record is gone", ErrClaimLost)
	case cur.Completed():
		return fmt.Errorf("%w: completed by owner %s", ErrClaimLost, cur.Owner)
	case cur.Owner != c.rec.Owner:
		return fmt.Errorf("%w: claimed by owner %s", ErrClaimLost, cur.Owner)
	}
	return nil
}

// renew extends the lease of the claim by its lease from now, in a
// transaction that checks it is still this attempt's. A renewal that
// fails otherwise is ErrClaimLost once the lease it last wrote has passed:
// a duplicate may have taken the task over since.
func (c *claim) renew(ctx context.Context) error {
	k := c.kit
	var next IdempotencyRecord
	err := k.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		if err := c.mine(tx); err != nil {
			return err
		}
		now := k.now().UTC()
		next = c.rec
		next.LeaseUntil, next.RenewedAt, next.ExpireAt = now.Add(c.lease), now, now.Add(k.ttl)
		return tx.Set(c.ref, next)
	})
	switch {
	case err == nil:
		c.rec = next
		return nil
	case errors.Is(err, ErrClaimLost):
		return err
	case !k.now().Before(c.rec.LeaseUntil):
		return fmt.Errorf("%w: not renewed before its lease ended at %s: %w", ErrClaimLost, c.rec.LeaseUntil.Format(time.RFC3339Nano), err)
	}
	return fmt.Errorf("agentkit: renew the claim of tenant %q key %q: %w", c.task.Tenant, c.task.Key, err)
}

// complete records the task completed, in a transaction that checks the
// claim is still this attempt's: a worker whose claim was lost never
// records a completion over the winner's claim.
func (c *claim) complete(ctx context.Context) error {
	k := c.kit
	return k.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		if err := c.mine(tx); err != nil {
			return err
		}
		now := k.now().UTC()
		return tx.Set(c.ref, IdempotencyRecord{Key: c.task.Key, Tenant: c.task.Tenant, Status: StatusCompleted, Agent: k.agent,
			Owner: c.rec.Owner, CompletedAt: now, ExpireAt: now.Add(k.ttl)})
	})
}

// release deletes the claim if it is still ours.
func (c *claim) release(ctx context.Context) error {
	return c.kit.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		switch err := c.mine(tx); {
		case errors.Is(err, ErrClaimLost):
			return nil // not ours any more: nothing to release
		case err != nil:
			return err
		}
		return tx.Delete(c.ref)
	})
}

// readIdempotency reads the records at refs in tx, in one round trip; a
// record is nil where there is none (never claimed, released, or expired).
func readIdempotency(tx *firestore.Transaction, refs []*firestore.DocumentRef) ([]*IdempotencyRecord, error) {
	snaps, err := tx.GetAll(refs)
	if err != nil {
		return nil, err
	}
	out := make([]*IdempotencyRecord, len(snaps))
	for i, snap := range snaps {
		if !snap.Exists() {
			continue
		}
		out[i] = new(IdempotencyRecord)
		if err := snap.DataTo(out[i]); err != nil {
			return nil, fmt.Errorf("decode %s: %w", snap.Ref.Path, err)
		}
	}
	return out, nil
}

func newOwner() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
