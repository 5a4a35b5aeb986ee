package store

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
)

// This file is the notifications outbox (issue 17): a transition someone must
// hear about (an entry that needs a human, a breaker changing state) writes
// its notification into notifications/{id} in the transaction that makes it,
// so it is recorded exactly when the transition is, whatever crashes or
// retries come between. shared/notify publishes what is pending. The id is
// derived from the transition (event.NotificationID), so a transaction the
// client retries writes the same document, never a second one.

// Notifications is the outbox collection.
const Notifications = "notifications"

// PublishedRetention is how long a published notification stays in the
// outbox (expire_at, the collection's TTL policy): long enough to look up
// what was sent and for deliveries that read it later, short enough that
// the collection does not grow with every transition. A pending one keeps
// expire_at = its time + Retention: reconcile alerts about it every run
// meanwhile.
const PublishedRetention = 7 * 24 * time.Hour

// States of an outbox document.
const (
	OutboxPending   = "pending"
	OutboxPublished = "published"
)

// Outbox is a notifications/{id} document.
type Outbox struct {
	ID string `firestore:"-"`
	// Notification is the event as published (jsdlq.notification.v1 JSON).
	Notification string `firestore:"notification"`
	Kind         string `firestore:"kind"`
	Tenant       string `firestore:"tenant"`
	// TaskType and Action are the entry's, for its triage task.
	TaskType string `firestore:"task_type,omitempty"`
	Action   string `firestore:"action,omitempty"`
	State    string `firestore:"state"`
	// LeaseOwner holds the claim until LeaseUntil: another publisher leaves
	// the document alone meanwhile.
	LeaseOwner string    `firestore:"lease_owner,omitempty"`
	LeaseUntil time.Time `firestore:"lease_until,omitempty"`
	Attempts   int       `firestore:"attempts"`
	LastError  string    `firestore:"last_error,omitempty"`
	// TriagePublished: the triage task is on the work stream (it is not
	// published again, even past JetStream's duplicate window).
	TriagePublished bool `firestore:"triage_published,omitempty"`
	// WebhooksPending: the tenant's webhook deliveries are still to be
	// created (webhook.go).
	WebhooksPending bool      `firestore:"webhooks_pending,omitempty"`
	CreatedAt       time.Time `firestore:"created_at"`
	PublishedAt     time.Time `firestore:"published_at,omitempty"`
	ExpireAt        time.Time `firestore:"expire_at"`
}

// Event decodes the notification.
func (o *Outbox) Event() (event.Notification, error) {
	return event.DecodeNotification([]byte(o.Notification))
}

func (s *Store) outboxRef(id string) *firestore.DocumentRef {
	return s.fs.Collection(Notifications).Doc(id)
}

// entryKinds are the statuses an entry's move into is notified, by kind.
var entryKinds = map[Status]event.NotificationKind{
	Escalated: event.NotifyEscalated, AwaitingApproval: event.NotifyAwaitingApproval, Quarantined: event.NotifyQuarantined,
}

// Notifies reports whether a move into st stages a notification (the entry
// needs a human): a function that made one publishes the outbox at once.
func Notifies(st Status) bool { _, ok := entryKinds[st]; return ok }

// entryNotification is the notification of an entry that moved from from
// into its current status at at, if that status needs a human.
func entryNotification(e *Entry, from Status, at time.Time) (event.Notification, bool) {
	kind, ok := entryKinds[e.Status]
	if !ok || from == e.Status {
		return event.Notification{}, false
	}
	n := event.NewNotification(kind, e.Tenant, e.ID, at)
	n.EntryID, n.Status, n.Category, n.ReasonCode = e.ID, string(e.Status), e.Category, e.ReasonCode
	if kind == event.NotifyEscalated {
		n.EscalateTo = event.TriageAgent(e.Plan.EscalateTo)
	}
	n.Summary = fmt.Sprintf("entry %s of tenant %s (%s %s, agent %s) is %s", e.ID, n.Tenant, e.Category, e.ReasonCode, e.Agent, e.Status)
	if from != "" {
		n.Summary += " (was " + string(from) + ")"
	}
	return n, true
}

// breakerNotifications are the notifications of the state changes b went
// through since it was read.
func breakerNotifications(b *Breaker) []event.Notification {
	var out []event.Notification
	for _, t := range b.changes {
		kind, ok := map[string]event.NotificationKind{
			BreakerOpen: event.NotifyBreakerOpened, BreakerHalfOpen: event.NotifyBreakerHalfOpen, BreakerClosed: event.NotifyBreakerClosed,
		}[t.To]
		if !ok {
			continue
		}
		n := event.NewNotification(kind, b.Tenant, b.Tenant, t.At)
		n.BreakerState, n.BreakerNote = t.To, t.Note
		n.Summary = fmt.Sprintf("tenant %s's breaker is %s (was %s): %s", n.Tenant, t.To, t.From, t.Note)
		out = append(out, n)
	}
	return out
}

// alertNotification is the notification that alert a was raised or
// cleared by the audit r: its id derives from the alert and the audit, so
// saving r again stages the same document.
func alertNotification(kind event.NotificationKind, a ActiveAlert, r *audit.Report) event.Notification {
	n := event.NewNotification(kind, a.Tenant, "alert/"+a.Key()+"/"+r.RunID, r.FinishedAt)
	n.AlertName, n.AlertMessage, n.Pipeline = a.Name, a.Message, a.Tenant == ""
	scope := "the pipeline"
	if a.Tenant != "" {
		scope = "tenant " + a.Tenant
	}
	if a.Agent != "" {
		scope = "agent " + a.Agent
	}
	if kind == event.NotifyAlertRaised {
		if a.Severity == audit.SevWarning {
			n.Severity = event.SeverityWarning
		}
		n.Summary = fmt.Sprintf("reconcile alert %s raised for %s by audit %s: %s", a.Name, scope, r.RunID, a.Message)
	} else {
		n.Summary = fmt.Sprintf("reconcile alert %s for %s cleared by audit %s (raised by audit %s at %s)",
			a.Name, scope, r.RunID, a.RaisedBy, a.RaisedAt.UTC().Format(time.RFC3339))
	}
	return n
}

// notifyEntry writes, in tx, the notification of e's move from from at at,
// when it needs one.
func (s *Store) notifyEntry(tx *firestore.Transaction, e *Entry, from Status, at time.Time) error {
	n, ok := entryNotification(e, from, at)
	if !ok {
		return nil
	}
	return s.stage(tx, n, e.TaskType, e.Action)
}

// notifyBreaker writes, in tx, the notifications of b's state changes.
func (s *Store) notifyBreaker(tx *firestore.Transaction, b *Breaker) error {
	for _, n := range breakerNotifications(b) {
		if err := s.stage(tx, n, "", ""); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) stage(tx *firestore.Transaction, n event.Notification, taskType, action string) error {
	body, err := n.Encode()
	if err != nil {
		return err
	}
	s.wrote(1)
	return tx.Set(s.outboxRef(n.ID), &Outbox{Notification: string(body), Kind: string(n.Kind), Tenant: n.Tenant,
		TaskType: taskType, Action: action, State: OutboxPending, WebhooksPending: n.ForTenant(), CreatedAt: n.At, ExpireAt: n.At.Add(Retention)})
}

// ClaimNotifications claims up to limit pending notifications for owner
// until lease from now: each claim is a transaction that takes only a
// notification no other owner holds, so two publishers never both publish
// one. Oldest first within the page read.
func (s *Store) ClaimNotifications(ctx context.Context, owner string, lease time.Duration, limit int) ([]*Outbox, error) {
	snaps, err := queryAll(ctx, s, s.fs.Collection(Notifications).Where("state", "==", OutboxPending).Limit(limit), "pending "+Notifications)
	if err != nil {
		return nil, err
	}
	var out []*Outbox
	for _, snap := range snaps {
		o, err := s.updateOutbox(ctx, snap.Ref.ID, func(o *Outbox, now time.Time) (bool, error) {
			if o.State != OutboxPending || !leaseFree(o.LeaseOwner, o.LeaseUntil, owner, now) {
				return false, nil
			}
			o.LeaseOwner, o.LeaseUntil = owner, now.Add(lease)
			o.Attempts++
			return true, nil
		})
		if err != nil {
			return out, err
		}
		if o != nil {
			out = append(out, o)
		}
	}
	return out, nil
}

// NotificationTriagePublished records that owner published the triage task.
func (s *Store) NotificationTriagePublished(ctx context.Context, id, owner string) error {
	return s.settleOutbox(ctx, id, owner, func(o *Outbox, _ time.Time) { o.TriagePublished = true })
}

// NotificationPublished marks a notification owner published.
func (s *Store) NotificationPublished(ctx context.Context, id, owner string) error {
	return s.settleOutbox(ctx, id, owner, func(o *Outbox, now time.Time) {
		o.State, o.PublishedAt, o.LeaseOwner, o.LeaseUntil, o.LastError = OutboxPublished, now, "", time.Time{}, ""
		o.ExpireAt = now.Add(PublishedRetention)
	})
}

// ReleaseNotification gives owner's claim up after a failed publish, noting
// the cause, so the next flush retries it at once.
func (s *Store) ReleaseNotification(ctx context.Context, id, owner string, cause error) error {
	return s.settleOutbox(ctx, id, owner, func(o *Outbox, _ time.Time) {
		o.LeaseOwner, o.LeaseUntil, o.LastError = "", time.Time{}, cause.Error()
	})
}

// GetNotification reads one outbox document.
func (s *Store) GetNotification(ctx context.Context, id string) (*Outbox, error) {
	return getDoc(ctx, s, s.outboxRef(id), "notification", decodeOutbox)
}

func (s *Store) settleOutbox(ctx context.Context, id, owner string, f func(*Outbox, time.Time)) error {
	_, err := s.updateOutbox(ctx, id, func(o *Outbox, now time.Time) (bool, error) {
		if o.State != OutboxPending || o.LeaseOwner != owner {
			return false, fmt.Errorf("%w: %s/%s is %s, held by %q", ErrLeaseLost, Notifications, id, o.State, o.LeaseOwner)
		}
		f(o, now)
		return true, nil
	})
	return err
}

// updateOutbox applies f to the document in a transaction; it returns the
// document when f changed it.
func (s *Store) updateOutbox(ctx context.Context, id string, f func(*Outbox, time.Time) (bool, error)) (*Outbox, error) {
	return claimDoc(ctx, s, s.outboxRef(id), "notification", "notification "+id, decodeOutbox, f)
}

func decodeOutbox(snap *firestore.DocumentSnapshot) (*Outbox, error) {
	return decodeDoc(snap, func(o *Outbox) *string { return &o.ID })
}
