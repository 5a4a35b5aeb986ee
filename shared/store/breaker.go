package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/authority"
)

// Breaker states.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// BreakerStatesNotClosed are the states in which a breaker holds replays
// back (open, or half-open with at most its one probe let through): the
// breakers reconcile audits and operators are shown. A new slice each call,
// so no caller can change another's.
func BreakerStatesNotClosed() []string { return []string{BreakerOpen, BreakerHalfOpen} }

// BreakerStates are every state a breaker can be in, the ones not closed
// first.
func BreakerStates() []string { return append(BreakerStatesNotClosed(), BreakerClosed) }

// BreakerConfig are a tenant breaker's thresholds (docs/storage.md, "Tenant
// circuit breakers").
type BreakerConfig struct {
	Threshold int           // failures in Window that open it
	Window    time.Duration // the rolling window
	Cooldown  time.Duration // open this long -> half-open
}

// DefaultBreaker: 10 failures in 10 minutes open it; 15 minutes later one
// probe replay is let through.
var DefaultBreaker = BreakerConfig{Threshold: 10, Window: 10 * time.Minute, Cooldown: 15 * time.Minute}

// Breaker is a circuit-breakers/{tenant} document.
type Breaker struct {
	Tenant string `firestore:"tenant" json:"tenant"`
	State  string `firestore:"state" json:"state"`
	// Failures are the times of the latest failures within the window, at
	// most Threshold of them, so the document stays small.
	Failures   []time.Time `firestore:"failures" json:"failures"`
	OpenedAt   time.Time   `firestore:"opened_at,omitempty" json:"opened_at,omitempty"`
	HalfOpenAt time.Time   `firestore:"half_open_at,omitempty" json:"half_open_at,omitempty"`
	ProbeEntry string      `firestore:"probe_entry,omitempty" json:"probe_entry,omitempty"`
	// ProbeAt is when the probe was let through; a probe whose outcome is
	// not known ProbeTimeout later is settled (SettleProbe).
	ProbeAt   time.Time    `firestore:"probe_at,omitempty" json:"probe_at,omitempty"`
	History   []Transition `firestore:"history" json:"history"`
	UpdatedAt time.Time    `firestore:"updated_at" json:"updated_at"`
	// changes are the state changes made since the document was read; the
	// transaction that writes it writes their notifications.
	changes []Transition
}

func (s *Store) breakerRef(tenant string) (*firestore.DocumentRef, error) {
	id, err := EntryID(tenant)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: %w", tenant, err)
	}
	return s.fs.Collection(Breakers).Doc(id), nil
}

func decodeBreaker(snap *firestore.DocumentSnapshot, tenant string) (*Breaker, error) {
	b := &Breaker{Tenant: tenant, State: BreakerClosed}
	if snap == nil || !snap.Exists() {
		return b, nil
	}
	if err := snap.DataTo(b); err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", Breakers, snap.Ref.ID, err)
	}
	if b.State == "" {
		b.State = BreakerClosed
	}
	return b, nil
}

func (b *Breaker) set(now time.Time, to string, by authority.Actor, note string) {
	if b.State == to {
		return
	}
	t := Transition{At: now, From: b.State, To: to, By: by.Name, Role: by.Role, Note: note}
	b.History = appendHistory(b.History, t)
	b.changes = append(b.changes, t)
	b.State = to
	switch to {
	case BreakerOpen:
		b.OpenedAt, b.ProbeEntry, b.ProbeAt = now, "", time.Time{}
	case BreakerHalfOpen:
		b.HalfOpenAt, b.ProbeEntry, b.ProbeAt = now, "", time.Time{}
	case BreakerClosed:
		b.Failures, b.ProbeEntry, b.ProbeAt = nil, "", time.Time{}
	}
}

// advance moves an open breaker whose cooldown has passed to half-open; it
// reports whether anything changed.
func (b *Breaker) advance(now time.Time, c BreakerConfig, by string) bool {
	if b.State == BreakerOpen && !now.Before(b.OpenedAt.Add(c.Cooldown)) {
		b.set(now, BreakerHalfOpen, authority.Actor{Name: by}, fmt.Sprintf("open for %s", c.Cooldown))
		return true
	}
	return false
}

// failure records one failure of the tenant. replayOf is the entry the
// failed task was a replay of: the death of the half-open probe reopens.
func (b *Breaker) failure(now time.Time, c BreakerConfig, replayOf, by string) {
	if b.State == BreakerHalfOpen && b.ProbeEntry != "" && replayOf == b.ProbeEntry {
		b.set(now, BreakerOpen, authority.Actor{Name: by}, "probe replay "+replayOf+" died")
		return
	}
	if b.State != BreakerClosed {
		return // already open: counting more changes nothing
	}
	kept := b.Failures[:0:0]
	for _, t := range b.Failures {
		if now.Sub(t) < c.Window {
			kept = append(kept, t)
		}
	}
	kept = append(kept, now)
	if len(kept) > c.Threshold {
		kept = kept[len(kept)-c.Threshold:]
	}
	b.Failures = kept
	if len(kept) >= c.Threshold {
		b.set(now, BreakerOpen, authority.Actor{Name: by}, fmt.Sprintf("%d failures in %s", len(kept), c.Window))
	}
}

// admit decides whether a replay of entryID may be scheduled: always when
// closed, never when open, and for exactly one probe when half-open.
func (b *Breaker) admit(now time.Time, entryID string) (ok, probe bool) {
	switch b.State {
	case BreakerClosed:
		return true, false
	case BreakerHalfOpen:
		if b.ProbeEntry == "" || b.ProbeEntry == entryID {
			if b.ProbeEntry == "" {
				b.ProbeAt = now
			}
			b.ProbeEntry = entryID
			return true, true
		}
	}
	return false, false
}

// GetBreaker reads a tenant's breaker (closed when it has none), advancing
// an expired open state in the returned value only.
func (s *Store) GetBreaker(ctx context.Context, tenant string) (*Breaker, error) {
	ref, err := s.breakerRef(tenant)
	if err != nil {
		return nil, err
	}
	snap, err := fetch(ctx, s, ref)
	if err != nil {
		return nil, err
	}
	b, err := decodeBreaker(snap, tenant)
	if err != nil {
		return nil, err
	}
	b.advance(s.Now(), s.breaker, "read")
	return b, nil
}

// BreakerAdvance moves an open breaker whose cooldown passed to half-open
// (reconcile's "breakers open too long"). It returns the breaker.
func (s *Store) BreakerAdvance(ctx context.Context, tenant, by string) (*Breaker, error) {
	return s.updateBreaker(ctx, tenant, func(b *Breaker, now time.Time) bool {
		return b.advance(now, s.breaker, by)
	})
}

// BreakerAdmit asks the breaker for permission to replay entryID outside
// classify (replay re-checks it before publishing; releasing held entries).
// It returns whether the replay may go ahead and whether it is the probe.
func (s *Store) BreakerAdmit(ctx context.Context, tenant, entryID, by string) (ok, probe bool, err error) {
	ok, probe, _, err = s.BreakerAdmitNew(ctx, tenant, entryID, by)
	return ok, probe, err
}

// BreakerAdmitNew is BreakerAdmit, also reporting whether this call made
// entryID the probe (fresh), rather than finding it the probe already (an
// operator's ProbeNow, an earlier admission): only a probe the caller made
// is the caller's to give back (ReturnProbe).
func (s *Store) BreakerAdmitNew(ctx context.Context, tenant, entryID, by string) (ok, probe, fresh bool, err error) {
	_, err = s.updateBreaker(ctx, tenant, func(b *Breaker, now time.Time) bool {
		changed := b.advance(now, s.breaker, by)
		before := b.ProbeEntry
		ok, probe = b.admit(now, entryID)
		fresh = probe && before != entryID
		return changed || b.ProbeEntry != before
	})
	return ok, probe, fresh, err
}

// BreakerProbeResult reports the outcome of the half-open probe: recovered
// closes the breaker, died reopens it. Results for entries that are not the
// current probe change nothing.
func (s *Store) BreakerProbeResult(ctx context.Context, tenant, entryID string, recovered bool, by string) (*Breaker, error) {
	b, _, err := s.probeResult(ctx, tenant, entryID, recovered, by)
	return b, err
}

// probeResult is BreakerProbeResult, also reporting whether the breaker
// moved.
func (s *Store) probeResult(ctx context.Context, tenant, entryID string, recovered bool, by string) (b *Breaker, moved bool, err error) {
	b, err = s.updateBreaker(ctx, tenant, func(b *Breaker, now time.Time) bool {
		if b.State != BreakerHalfOpen || b.ProbeEntry != entryID {
			return false
		}
		if recovered {
			b.set(now, BreakerClosed, authority.Actor{Name: by}, "probe "+entryID+" recovered")
		} else {
			b.set(now, BreakerOpen, authority.Actor{Name: by}, "probe "+entryID+" died")
		}
		moved = true
		return true
	})
	return b, moved, err
}

func (s *Store) updateBreaker(ctx context.Context, tenant string, f func(*Breaker, time.Time) bool) (*Breaker, error) {
	ref, err := s.breakerRef(tenant)
	if err != nil {
		return nil, err
	}
	var out *Breaker
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := txFetch(s, tx, ref)
		if err != nil {
			return err
		}
		b, err := decodeBreaker(snap, tenant)
		if err != nil {
			return err
		}
		now := s.Now()
		out = b
		if !f(b, now) {
			return nil
		}
		b.UpdatedAt = now
		if _, err := s.notifyBreaker(tx, b); err != nil {
			return err
		}
		s.wrote(1)
		return tx.Set(ref, b)
	})
	if err != nil {
		return nil, txError("breaker "+tenant, err)
	}
	return out, nil
}

// KnownOpenFor is how long an instance trusts a tenant breaker it saw open
// without reading it again (knownOpen). An operator can close it, or send
// a probe, at any moment (BreakerClose, BreakerProbeNow), and no other
// instance hears of it: for at most this long after, they still hold the
// tenant's new entries, which reconcile then releases.
const KnownOpenFor = 30 * time.Second

// sawOpen is what knownOpen remembers of a breaker seen open.
type sawOpen struct{ openedAt, seenAt time.Time }

// knownOpen reports whether this instance saw tenant's breaker open, at
// most KnownOpenFor ago and with a cooldown that has not passed at now, and
// since when it is open. By itself such a breaker does not change before
// the cooldown ends: it leaves open only by turning half-open, and only
// after the cooldown; failures are not counted while it is open. So a new
// entry of that tenant needs neither to read nor to write the breaker
// document, which every entry of a one-tenant storm would otherwise contend
// on (Firestore sustains about one write per second per document); reading
// it again every KnownOpenFor catches an operator's override. A cached time
// older than the document's (a probe died and reopened it) only ends the
// shortcut early.
func (s *Store) knownOpen(tenant string, now time.Time) (openedAt time.Time, ok bool) {
	v, found := s.openSince.Load(tenant)
	if !found {
		return time.Time{}, false
	}
	if saw := v.(sawOpen); now.Before(saw.openedAt.Add(s.breaker.Cooldown)) && now.Before(saw.seenAt.Add(KnownOpenFor)) {
		return saw.openedAt, true
	}
	s.openSince.CompareAndDelete(tenant, v)
	return time.Time{}, false
}

// sawBreaker remembers an open breaker for knownOpen (and forgets any other
// state).
func (s *Store) sawBreaker(b *Breaker) {
	if b.State == BreakerOpen && !b.OpenedAt.IsZero() {
		s.openSince.Store(b.Tenant, sawOpen{openedAt: b.OpenedAt, seenAt: s.Now()})
		return
	}
	s.openSince.Delete(b.Tenant)
}

// ErrBreakerOverride wraps a refused breaker action: nothing to override,
// or no actor or reason given.
var ErrBreakerOverride = errors.New("store: breaker override refused")

// BreakerClose is the operator's override of an open or half-open breaker
// (docs/runbook.md, "The gates and their overrides"): it closes now,
// forgetting the failures counted so far. Who and why are recorded in the
// breaker's history.
func (s *Store) BreakerClose(ctx context.Context, tenant string, by authority.Actor, reason string) (*Breaker, error) {
	return s.overrideBreaker(ctx, tenant, by, reason, "is closed", func(b *Breaker, now time.Time) {
		b.set(now, BreakerClosed, by, "closed by "+by.String()+": "+reason)
	})
}

// BreakerProbeNow is the operator's other override: the breaker turns
// half-open now (cooldown or not) with entryID as its one probe, replacing
// a probe in flight; the probe's outcome closes or reopens it as any
// probe's does. Who and why are recorded in the breaker's history.
func (s *Store) BreakerProbeNow(ctx context.Context, tenant, entryID string, by authority.Actor, reason string) (*Breaker, error) {
	return s.overrideBreaker(ctx, tenant, by, reason, "is closed; the replay needs no probe", func(b *Breaker, now time.Time) {
		note := "probe " + entryID + " sent by " + by.String() + ": " + reason
		if b.State == BreakerHalfOpen {
			b.History = appendHistory(b.History, Transition{At: now, From: b.State, To: b.State, By: by.Name, Role: by.Role, Note: note})
		} else {
			b.set(now, BreakerHalfOpen, by, note)
		}
		b.ProbeEntry, b.ProbeAt = entryID, now
	})
}

// overrideBreaker applies an operator's override to a breaker that is not
// closed; without an actor and a reason, or on a closed breaker (whyNot
// says why it needs none), it is refused with ErrBreakerOverride.
func (s *Store) overrideBreaker(ctx context.Context, tenant string, by authority.Actor, reason, whyNot string, apply func(*Breaker, time.Time)) (*Breaker, error) {
	if strings.TrimSpace(by.Name) == "" || strings.TrimSpace(reason) == "" {
		return nil, fmt.Errorf("%w: a breaker override needs an actor and a reason", ErrBreakerOverride)
	}
	var refused error
	b, err := s.updateBreaker(ctx, tenant, func(b *Breaker, now time.Time) bool {
		if b.State == BreakerClosed {
			refused = fmt.Errorf("%w: the breaker of tenant %s %s", ErrBreakerOverride, tenant, whyNot)
			return false
		}
		apply(b, now)
		return true
	})
	if err == nil {
		err = refused
	}
	if err == nil {
		s.sawBreaker(b)
	}
	return b, err
}

// DefaultProbeTimeout is how long a half-open breaker waits for its probe's
// outcome before SettleProbe decides it.
const DefaultProbeTimeout = 30 * time.Minute

// Probe outcomes SettleProbe reports.
const (
	ProbeRecovered = "recovered" // closed the breaker
	ProbeDied      = "died"      // reopened it
)

// SettleProbe decides a half-open probe whose outcome is not known timeout
// after it was let through, so a breaker is never stuck half-open. A probe
// whose task has an idempotency key recovered if its completion is
// visible (the entry recovered, or the key's record completed), and
// otherwise counts as died: the breaker reopens and lets another probe
// through after its cooldown. A probe without a key can show no
// completion; its death would have reopened the breaker already (classify
// counts the failure of a replay of the probe), so having not died within
// timeout counts as recovered, but only once it was published (replayed):
// a keyless probe that never went out (admitted, then held back, escalated
// or still retrying its publish) proves nothing and counts as died. It
// returns the outcome, "" when there was nothing to settle.
func (s *Store) SettleProbe(ctx context.Context, tenant string, timeout time.Duration, by string) (string, error) {
	b, err := s.GetBreaker(ctx, tenant)
	if err != nil {
		return "", err
	}
	now := s.Now()
	if b.State != BreakerHalfOpen || b.ProbeEntry == "" || b.ProbeAt.IsZero() || now.Sub(b.ProbeAt) < timeout {
		return "", nil
	}
	probe := b.ProbeEntry
	recovered := true
	e, err := s.GetMeta(ctx, probe)
	switch {
	case errors.Is(err, ErrNotFound):
		// Expired or deleted: nothing shows it completed.
		recovered = false
	case err != nil:
		return "", err
	case e.Status == Recovered:
	case e.IdempotencyKey != "":
		c, err := s.Completion(ctx, e)
		if err != nil {
			return "", err
		}
		recovered = c.Done
	default:
		recovered = e.Status == Replayed
	}
	outcome, note := ProbeRecovered, fmt.Sprintf("probe %s settled after %s: ", probe, timeout)
	switch {
	case recovered:
		note += "completed or did not die"
	case e != nil && e.IdempotencyKey == "" && e.Status != Replayed:
		outcome, note = ProbeDied, note+"never published ("+string(e.Status)+"), counted as died"
	default:
		outcome, note = ProbeDied, note+"no completion visible, counted as died"
	}
	_, err = s.updateBreaker(ctx, tenant, func(b *Breaker, now time.Time) bool {
		if b.State != BreakerHalfOpen || b.ProbeEntry != probe {
			outcome = "" // someone decided meanwhile
			return false
		}
		if recovered {
			b.set(now, BreakerClosed, authority.Actor{Name: by}, note)
		} else {
			b.set(now, BreakerOpen, authority.Actor{Name: by}, note)
		}
		return true
	})
	if err != nil {
		return "", err
	}
	return outcome, nil
}

// ReleaseProbe reports a half-open probe that will not be replayed (its
// entry was held back, escalated or sent for approval) as failed: the breaker
// reopens and picks a new probe after its cooldown, instead of waiting
// forever for a replay that is not coming. Entries that are not the probe
// change nothing. released reports whether the breaker reopened (it staged
// a notification).
//
// The breaker is asked even when e is not marked as the probe: replay marks
// its probe only with the publish, so a probe admitted by a delivery that
// then failed (a publish refused for good, or a 503 whose redelivery the
// policy gates) is the breaker's probe but not yet marked. For an unmarked
// entry that is one plain read, not a transaction on the tenant's breaker
// document (every discard and gated replay asks), and best effort: a failed
// read is no error of the caller's action, since reconcile settles a probe
// that was never published as died (SettleProbe). A breaker this instance
// knows to be open has no probe and is not read.
func (s *Store) ReleaseProbe(ctx context.Context, e *Entry, by string) (released bool, err error) {
	if !e.BreakerProbe {
		if _, open := s.knownOpen(e.Tenant, s.Now()); open {
			return false, nil
		}
		if b, err := s.GetBreaker(ctx, e.Tenant); err != nil || b.State != BreakerHalfOpen || b.ProbeEntry != e.ID {
			return false, nil
		}
	}
	_, released, err = s.probeResult(ctx, e.Tenant, e.ID, false, by)
	return released, err
}

// ReturnProbe gives back the half-open probe admitted for entryID
// (BreakerAdmit) when it is not sent after all because the entry moved on
// before its release: the breaker stays half-open and admits the next entry
// as its probe. ReleaseProbe is for a probe that left the replay path, and
// reopens. An entry that is not the probe changes nothing.
func (s *Store) ReturnProbe(ctx context.Context, tenant, entryID string) error {
	_, err := s.updateBreaker(ctx, tenant, func(b *Breaker, _ time.Time) bool {
		if b.State != BreakerHalfOpen || b.ProbeEntry != entryID {
			return false
		}
		b.ProbeEntry, b.ProbeAt = "", time.Time{}
		return true
	})
	return err
}

// ListBreakers returns up to limit tenant breakers in one of states:
// BreakerStatesNotClosed for those holding replays back, BreakerStates for
// all.
func (s *Store) ListBreakers(ctx context.Context, states []string, limit int) ([]*Breaker, error) {
	return queryDocs(ctx, s, s.fs.Collection(Breakers).Where("state", "in", states).Limit(limit), Breakers,
		func(snap *firestore.DocumentSnapshot) (*Breaker, error) {
			b, err := decodeBreaker(snap, "")
			if err != nil {
				return nil, err
			}
			if b.Tenant == "" {
				if b.Tenant, err = EventID(snap.Ref.ID); err != nil {
					b.Tenant = snap.Ref.ID
				}
			}
			return b, nil
		})
}

// CountBreakers counts the breakers in one of states with one aggregation
// query (a page that lists the first few says how many there are).
func (s *Store) CountBreakers(ctx context.Context, states []string) (int64, error) {
	return s.count(ctx, s.fs.Collection(Breakers).Where("state", "in", states), Breakers)
}
