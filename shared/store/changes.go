package store

import (
	"context"
	"encoding/base64"
	"strconv"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/event"
)

// This file is the change feed's side of the outbox (issue 35): every
// transaction that creates or moves an entry writes the move's row
// (event.ChangeRow) into dlq-changes/{change id}, the same outbox documents
// as the notifications (notifications.go) in a collection of their own, so
// the row exists exactly when the move does, whatever crashes or retries
// come between, and the feed never crowds notifications out of a flush.
// The id derives from the move (entry, statuses, time): a transaction the
// client retries writes the same document, never a second one. shared/notify
// claims, publishes and settles them as it does notifications.

// Changes is the change feed's outbox collection.
const Changes = "dlq-changes"

// ChangeRowOf is the feed's row of t, a move of e (e as the move left it),
// with the payload when e's policy rule asks for it (Plan.FeedPayload) and
// it is inline: the one mapping from an entry's move to its row, which the
// feed and dlqctl export both use.
func ChangeRowOf(e *Entry, t Transition) event.ChangeRow {
	r := event.NewChangeRow(e.ID, t.From, t.To, t.At)
	r.Tenant, r.Agent, r.TaskType, r.Stream = e.Tenant, e.Agent, e.TaskType, e.Stream
	r.ReasonCode, r.Category, r.Action, r.Strategy = e.ReasonCode, e.Category, e.Action, e.Strategy
	r.Transition = event.ChangeTransition(t.From, t.To, t.Note, ApprovalNote)
	r.ActorRole = string(t.Role)
	r.Attempt = int64(e.Replays)
	r.PolicyVersion = e.PolicyVersion
	r.PayloadSize, r.PayloadSHA256 = e.PayloadSize, e.PayloadSHA256
	r.RootID, r.ReplayOf = e.RootID, e.ReplayOf
	if h, err := event.DecodeHeaders(e.Headers); err == nil {
		r.PredictedReason = event.Header(h, event.HeaderPredictedReason)
		if p, err := strconv.ParseFloat(event.Header(h, event.HeaderPredictedProbability), 64); err == nil && p >= 0 && p <= 1 {
			r.PredictedProbability = p
		}
	}
	r.CreatedAt, r.ExpireAt = e.CreatedAt.UTC(), e.ExpireAt.UTC()
	r.AgeMs = max(t.At.Sub(e.CreatedAt).Milliseconds(), 0)
	if e.Plan.FeedPayload && len(e.Payload) > 0 && e.PayloadChunkCount == 0 {
		r.Payload = base64.StdEncoding.EncodeToString(e.Payload)
	}
	return r
}

// stageChange writes, in tx, the feed's row of e's last transition (the
// move the transaction makes), and returns the document as written.
func (s *Store) stageChange(tx *firestore.Transaction, e *Entry) (*Outbox, error) {
	t := e.History[len(e.History)-1]
	r := ChangeRowOf(e, t)
	body, err := r.Encode()
	if err != nil {
		return nil, err
	}
	o := &Outbox{ID: r.ChangeID, Change: string(body), Kind: r.Transition, Tenant: r.Tenant, TaskType: e.TaskType,
		Action: e.Action, State: OutboxPending, CreatedAt: r.At, ExpireAt: r.At.Add(Retention), coll: Changes}
	s.wrote(1)
	return o, tx.Set(s.outboxDoc(o), o)
}

// Row decodes the feed row o holds.
func (o *Outbox) Row() (event.ChangeRow, error) { return event.DecodeChangeRow([]byte(o.Change)) }

// ClaimChanges claims up to limit pending rows of the change feed for owner
// until lease from now, as ClaimNotifications claims notifications.
func (s *Store) ClaimChanges(ctx context.Context, owner string, lease time.Duration, limit int) ([]*Outbox, error) {
	return s.claimPending(ctx, Changes, owner, lease, limit)
}

// GetChange reads one row of the change feed's outbox.
func (s *Store) GetChange(ctx context.Context, id string) (*Outbox, error) {
	return getDoc(ctx, s, s.fs.Collection(Changes).Doc(id), "change", decodeOutbox)
}
