package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/authority"
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
	// TenantNotification is the event as the tenant's webhooks receive it,
	// when that differs from Notification: whoever made the change (an
	// operator's override of a breaker) named by role, as tenants are
	// shown every actor (ForTenant).
	TenantNotification string `firestore:"tenant_notification,omitempty"`
	Kind               string `firestore:"kind"`
	Tenant             string `firestore:"tenant"`
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

	// Change is, in the change feed's outbox (Changes), the row as
	// published (jsdlq.change.v1 JSON, changes.go); Notification is then
	// empty.
	Change string `firestore:"change,omitempty"`

	// seen is the document's update time as this store last read or wrote
	// it: a claim or settle from it is a write conditioned on that, no read.
	seen time.Time
	// coll is the outbox collection the document is in (Notifications
	// when empty, or Changes).
	coll string
}

// collection is the outbox collection o is in.
func (o *Outbox) collection() string { return cmp.Or(o.coll, Notifications) }

// IsChange reports whether o is a row of the change feed (Changes), not a
// notification.
func (o *Outbox) IsChange() bool { return o.collection() == Changes }

// leaseFields are the fields a claim or a settle changes, as the updates
// of a conditioned write (an empty optional field is deleted, as the
// document's omitempty leaves it out).
func (o *Outbox) leaseFields() []firestore.Update {
	opt := func(path string, v any, empty bool) firestore.Update {
		if empty {
			return firestore.Update{Path: path, Value: firestore.Delete}
		}
		return firestore.Update{Path: path, Value: v}
	}
	return []firestore.Update{
		{Path: "state", Value: o.State},
		opt("lease_owner", o.LeaseOwner, o.LeaseOwner == ""),
		opt("lease_until", o.LeaseUntil, o.LeaseUntil.IsZero()),
		{Path: "attempts", Value: o.Attempts},
		opt("last_error", o.LastError, o.LastError == ""),
		opt("triage_published", o.TriagePublished, !o.TriagePublished),
		opt("published_at", o.PublishedAt, o.PublishedAt.IsZero()),
		{Path: "expire_at", Value: o.ExpireAt},
	}
}

// claimFor leases o to owner until now+lease when it is pending and no
// lease on it is running, and reports whether it did. A running lease is
// held whoever holds it: one flusher's concurrent calls share its owner, and
// must not both publish one notification.
func (o *Outbox) claimFor(owner string, now time.Time, lease time.Duration) bool {
	if o.State != OutboxPending || (o.LeaseOwner != "" && o.LeaseUntil.After(now)) {
		return false
	}
	o.LeaseOwner, o.LeaseUntil = owner, now.Add(lease)
	o.Attempts++
	return true
}

// Event decodes the notification.
func (o *Outbox) Event() (event.Notification, error) {
	return event.DecodeNotification([]byte(o.Notification))
}

// ForTenant is the notification as its tenant's webhooks receive it (the
// same id, kind and facts; no operator's identity).
func (o *Outbox) ForTenant() string { return cmp.Or(o.TenantNotification, o.Notification) }

func (s *Store) outboxRef(id string) *firestore.DocumentRef {
	return s.fs.Collection(Notifications).Doc(id)
}

// outboxDoc is o's document, in whichever outbox collection it is.
func (s *Store) outboxDoc(o *Outbox) *firestore.DocumentRef {
	return s.fs.Collection(o.collection()).Doc(o.ID)
}

// entryKinds are the notification kinds of the statuses that need a human
// (Status.NeedsHuman; a test holds the two together).
var entryKinds = map[Status]event.NotificationKind{
	Escalated: event.NotifyEscalated, AwaitingApproval: event.NotifyAwaitingApproval, Quarantined: event.NotifyQuarantined,
}

// Notifies reports whether a move into st stages a notification (the entry
// needs a human): a function that made one publishes the outbox at once.
func Notifies(st Status) bool { return st.NeedsHuman() }

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

// actedNotification is a notification and who made the change it tells of.
type actedNotification struct {
	n  event.Notification
	by authority.Actor
}

// breakerNotifications are the notifications of the state changes b went
// through since it was read, with who made each.
func breakerNotifications(b *Breaker) []actedNotification {
	var out []actedNotification
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
		out = append(out, actedNotification{n, authority.Actor{Name: t.By, Role: t.Role}})
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
// when it needs one, and returns what it wrote.
func (s *Store) notifyEntry(tx *firestore.Transaction, e *Entry, from Status, at time.Time) ([]*Outbox, error) {
	n, ok := entryNotification(e, from, at)
	if !ok {
		return nil, nil
	}
	o, err := s.stage(tx, n, e.TaskType, e.Action)
	if err != nil {
		return nil, err
	}
	return []*Outbox{o}, nil
}

// notifyBreaker writes, in tx, the notifications of b's state changes, and
// returns what it wrote.
func (s *Store) notifyBreaker(tx *firestore.Transaction, b *Breaker) ([]*Outbox, error) {
	var out []*Outbox
	for _, a := range breakerNotifications(b) {
		o, err := s.stageBy(tx, a.n, a.by, "", "")
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// stage writes n into the outbox in tx and returns the document as
// written (its update time is the commit's: see stagedAt).
func (s *Store) stage(tx *firestore.Transaction, n event.Notification, taskType, action string) (*Outbox, error) {
	return s.stageBy(tx, n, authority.Actor{}, taskType, action)
}

// stageBy is stage of a change by made: the tenant's webhooks get n naming
// them by role (tenantView).
func (s *Store) stageBy(tx *firestore.Transaction, n event.Notification, by authority.Actor, taskType, action string) (*Outbox, error) {
	body, err := n.Encode()
	if err != nil {
		return nil, err
	}
	o := &Outbox{ID: n.ID, Notification: string(body), Kind: string(n.Kind), Tenant: n.Tenant,
		TaskType: taskType, Action: action, State: OutboxPending, WebhooksPending: n.ForTenant(), CreatedAt: n.At, ExpireAt: n.At.Add(Retention)}
	if o.WebhooksPending {
		if o.TenantNotification, err = tenantView(n, by); err != nil {
			return nil, err
		}
	}
	s.wrote(1)
	return o, tx.Set(s.outboxRef(n.ID), o)
}

// tenantView is n as its tenant's webhooks receive it, "" when that is n
// itself: by, who made the change, named by role in its texts, as the
// tenant API names every actor (authority.Redact).
func tenantView(n event.Notification, by authority.Actor) (string, error) {
	t := n
	t.BreakerNote, t.Summary = authority.Redact(n.BreakerNote, by), authority.Redact(n.Summary, by)
	if t == n {
		return "", nil
	}
	body, err := t.Encode()
	return string(body), err
}

// stagedAt records that staged were written by a transaction committed at
// commit: every write of a commit carries its time as the document's
// update time, so a claim from them is a conditioned write (ClaimStaged).
func stagedAt(staged []*Outbox, commit firestore.CommitResponse) []*Outbox {
	for _, o := range staged {
		o.seen = commit.CommitTime()
	}
	return staged
}

// ClaimNotifications claims up to limit pending notifications for owner
// until lease from now, so two publishers never both publish one. A
// notification under a running lease is left
// alone, whoever holds it (claimFor); a free one is claimed by a write conditioned on the document being
// as the query read it, so a claim reads nothing and of two publishers
// claiming at once one wins. One that changed since the query is left to
// the next flush.
func (s *Store) ClaimNotifications(ctx context.Context, owner string, lease time.Duration, limit int) ([]*Outbox, error) {
	return s.claimPending(ctx, Notifications, owner, lease, limit)
}

// claimPending is ClaimNotifications of the outbox collection coll.
func (s *Store) claimPending(ctx context.Context, coll, owner string, lease time.Duration, limit int) ([]*Outbox, error) {
	snaps, err := queryAll(ctx, s, s.fs.Collection(coll).Where("state", "==", OutboxPending).Limit(limit), "pending "+coll)
	if err != nil {
		return nil, err
	}
	var out []*Outbox
	for _, snap := range snaps {
		o, err := decodeOutbox(snap)
		if err != nil {
			return out, err
		}
		claim := *o
		if !claim.claimFor(owner, s.Now(), lease) {
			continue
		}
		ok, err := s.writeOutboxSeen(ctx, &claim)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, &claim)
		}
	}
	return out, nil
}

// ClaimStaged claims for owner until lease from now the notification o that
// this store staged (RecordResult.Staged), by id: a write conditioned on
// the document being as the commit wrote it, so it reads nothing. One that
// changed since (another flush claimed it, or its webhook fan-out was made)
// is read in a transaction and claimed if no lease on it is running, this
// owner's included. It reports
// the claim, or nil when the notification is held, published or gone.
func (s *Store) ClaimStaged(ctx context.Context, o *Outbox, owner string, lease time.Duration) (*Outbox, error) {
	claim := *o
	if claim.claimFor(owner, s.Now(), lease) {
		ok, err := s.writeOutboxSeen(ctx, &claim)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return &claim, nil
		}
	}
	cur, err := s.updateOutbox(ctx, o, func(cur *Outbox, now time.Time) (bool, error) {
		return cur.claimFor(owner, now, lease), nil
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return cur, err
}

// NotificationTriagePublished records that owner published o's triage task.
func (s *Store) NotificationTriagePublished(ctx context.Context, o *Outbox, owner string) error {
	return s.settleOutbox(ctx, o, owner, func(o *Outbox, _ time.Time) { o.TriagePublished = true })
}

// NotificationPublished marks o, which owner claimed, published.
func (s *Store) NotificationPublished(ctx context.Context, o *Outbox, owner string) error {
	return s.settleOutbox(ctx, o, owner, func(o *Outbox, now time.Time) {
		o.State, o.PublishedAt, o.LeaseOwner, o.LeaseUntil, o.LastError = OutboxPublished, now, "", time.Time{}, ""
		o.ExpireAt = now.Add(PublishedRetention)
	})
}

// ReleaseNotification gives owner's claim of o up after a failed publish,
// noting the cause, so the next flush retries it at once.
func (s *Store) ReleaseNotification(ctx context.Context, o *Outbox, owner string, cause error) error {
	return s.settleOutbox(ctx, o, owner, func(o *Outbox, _ time.Time) {
		o.LeaseOwner, o.LeaseUntil, o.LastError = "", time.Time{}, cause.Error()
	})
}

// GetNotification reads one outbox document.
func (s *Store) GetNotification(ctx context.Context, id string) (*Outbox, error) {
	return getDoc(ctx, s, s.outboxRef(id), "notification", decodeOutbox)
}

// settleOutbox applies f to o, which owner claimed, and updates o to what
// is stored. From o as this store wrote it, it is a write conditioned on
// the document being unchanged since (no read); one that changed meanwhile
// (the webhook fan-out, a claim taken over after its lease) is read again
// in a transaction, which refuses it with ErrLeaseLost unless owner still
// holds it.
func (s *Store) settleOutbox(ctx context.Context, o *Outbox, owner string, f func(*Outbox, time.Time)) error {
	if o.State == OutboxPending && o.LeaseOwner == owner {
		next := *o
		f(&next, s.Now())
		ok, err := s.writeOutboxSeen(ctx, &next)
		if err != nil {
			return err
		}
		if ok {
			*o = next
			return nil
		}
	}
	cur, err := s.updateOutbox(ctx, o, func(cur *Outbox, now time.Time) (bool, error) {
		if cur.State != OutboxPending || cur.LeaseOwner != owner {
			return false, fmt.Errorf("%w: %s/%s is %s, held by %q", ErrLeaseLost, o.collection(), o.ID, cur.State, cur.LeaseOwner)
		}
		f(cur, now)
		return true, nil
	})
	if err != nil {
		return err
	}
	// (Its update time is the read's, not the write's: a later settle from
	// it reads again.)
	*o = *cur
	return nil
}

// writeOutboxSeen writes o's lease fields on condition that its document is
// unchanged since o.seen, and reports whether it wrote; o.seen is then the
// write's time. A document that changed, or is gone, is left as it is.
func (s *Store) writeOutboxSeen(ctx context.Context, o *Outbox) (bool, error) {
	if o.seen.IsZero() {
		return false, nil
	}
	res, err := s.outboxDoc(o).Update(ctx, o.leaseFields(), firestore.LastUpdateTime(o.seen))
	switch status.Code(err) {
	case codes.OK:
		s.wrote(1)
		o.seen = res.UpdateTime
		return true, nil
	case codes.FailedPrecondition, codes.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("firestore update %s/%s: %w", o.collection(), o.ID, err)
}

// updateOutbox applies f to o's document in a transaction; it returns the
// document when f changed it.
func (s *Store) updateOutbox(ctx context.Context, o *Outbox, f func(*Outbox, time.Time) (bool, error)) (*Outbox, error) {
	what := "notification"
	if o.IsChange() {
		what = "change"
	}
	return claimDoc(ctx, s, s.outboxDoc(o), what, what+" "+o.ID, decodeOutbox, f)
}

func decodeOutbox(snap *firestore.DocumentSnapshot) (*Outbox, error) {
	o, err := decodeDoc(snap, func(o *Outbox) *string { return &o.ID })
	if err != nil {
		return nil, err
	}
	o.seen = snap.UpdateTime
	if snap.Ref.Parent.ID == Changes {
		o.coll = Changes
	}
	return o, nil
}
