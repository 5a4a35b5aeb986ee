package store

import (
	"context"
	"fmt"
	"slices"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RecordResult is what Record did.
type RecordResult struct {
	// Entry is the entry as stored (payload chunks not loaded).
	Entry *Entry
	// Created is true when this call created the entry (and counted it in
	// the metrics); false when it existed already.
	Created bool
	// Merged is true when enrichment from this event was added to an
	// existing entry (an explicit record after the advisory, or back).
	Merged bool
	// Breaker is the tenant breaker's state after the call.
	Breaker string
	// Staged are the notifications the call staged (a new entry that needs
	// a human, a breaker that changed state), as written: a flush right
	// after claims them by id without a read (ClaimStaged).
	Staged []*Outbox
	// Refused says why this event's enrichment was not merged into the
	// existing entry ("" when it was, or had nothing to add): it names
	// another tenant than the entry's, whose tenant was known. Merging
	// would put one tenant's payload and headers in another's entry.
	Refused string
	// Retenanted is the tenant the entry had before this event named its
	// tenant ("" when it did not change): an entry made from an advisory
	// without its message (no headers, no subject) could only be given
	// the default tenant, and the explicit record that followed knows the
	// real one.
	Retenanted string
	// HandOff is why the parent's completion check could not be handed to
	// this replay's entry (nil when it was, or had nothing to hand off):
	// the parent is then checked on its own schedule, which costs reads,
	// not correctness.
	HandOff error
}

// Notified reports whether the call staged a notification: the caller
// flushes the outbox after it. An entry held by a breaker known to be open
// stages none, so a one-tenant storm does not query the outbox once per
// entry.
func (r RecordResult) Notified() bool { return len(r.Staged) > 0 }

// Record stores a classified entry. In one transaction it creates the entry
// when absent, adds it to the hour's metrics and updates the tenant breaker
// (which may turn Scheduled into Held, or make the entry the half-open
// probe). When the entry exists already (a redelivered event, or the other
// capture path of the same message) nothing is counted again: enrichment the
// stored entry lacks (payload, failure record, headers) is merged in, and the
// stored entry is returned.
//
// e must carry ID, the classification and the status the decision asks for;
// Record fills the timestamps, root id, expiry, payload digest and history.
// A new entry costs one read (the breaker) and five writes (entry, metrics
// shard, day rollup shard, change feed row, breaker), plus one write per
// payload chunk above InlinePayload; while this instance knows the tenant's
// breaker is open, no read and four writes.
func (s *Store) Record(ctx context.Context, e *Entry, by string) (RecordResult, error) {
	if e.ID == "" {
		return RecordResult{}, fmt.Errorf("%w: entry without id", ErrBadID)
	}
	if len(e.Payload) > MaxPayload {
		return RecordResult{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(e.Payload), MaxPayload)
	}
	now := s.Now()
	e.CreatedAt, e.UpdatedAt = now, now
	e.expire()
	if e.RootID == "" {
		e.RootID = e.ID
	}
	if len(e.Kinds) == 0 && e.Kind != "" {
		e.Kinds = []string{e.Kind}
	}
	if !e.PayloadMissing {
		// A missing payload keeps the size and digest the caller knows
		// (a truncated event still carries them).
		e.PayloadSize, e.PayloadSHA256 = int64(len(e.Payload)), PayloadSum(e.Payload)
	} else if len(e.Payload) > 0 {
		return RecordResult{}, fmt.Errorf("%w: entry %s is marked payload_missing but has %d bytes", ErrInvalid, e.ID, len(e.Payload))
	}
	full := e.Payload
	if len(e.Payload) > InlinePayload || len(e.Payload) > 0 && !fitsInline(e) {
		if err := s.writeChunks(ctx, e.ID, e); err != nil {
			return RecordResult{}, err
		}
		e.Payload = nil
	}
	defer func() { e.Payload = full }()

	res, err := s.create(ctx, e, by)
	if status.Code(err) == codes.AlreadyExists {
		res, err = s.merge(ctx, e)
		if err != nil {
			return RecordResult{}, err
		}
	} else if err != nil {
		return RecordResult{}, txError("record "+e.ID, err)
	}
	// After the commit and on every redelivery (the write is the same
	// each time), so an entry's parent is handed off whichever attempt
	// gets through.
	res.HandOff = s.handOffCheck(ctx, e.parent, res.Entry)
	return res, nil
}

func (s *Store) create(ctx context.Context, e *Entry, by string) (RecordResult, error) {
	bref, err := s.breakerRef(e.Tenant)
	if err != nil {
		return RecordResult{}, err
	}
	wanted, taskName := e.Status, e.TaskName
	var res RecordResult
	var seen *Breaker
	var staged []*Outbox
	var commit firestore.CommitResponse
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		seen, staged = nil, nil
		now := s.Now()
		// A breaker known to be open stays so (knownOpen): the entry is held
		// and the breaker document is neither read nor written.
		openedAt, known := s.knownOpen(e.Tenant, now)
		b := &Breaker{Tenant: e.Tenant, State: BreakerOpen, OpenedAt: openedAt}
		if !known {
			snap, err := txFetch(s, tx, bref)
			if err != nil {
				return err
			}
			if b, err = decodeBreaker(snap, e.Tenant); err != nil {
				return err
			}
		}
		b.advance(now, s.breaker, by)
		b.failure(now, s.breaker, e.ReplayOf, by)
		// Each attempt of the transaction starts from the caller's wishes.
		e.Status, e.BreakerProbe, e.TaskName = wanted, false, taskName
		note := ""
		if wanted == Scheduled {
			ok, probe := b.admit(now, e.ID)
			switch {
			case !ok:
				// The name is chosen again when the entry is released.
				e.Status, note = Held, "tenant breaker "+b.State
				e.TaskName = ""
			case probe:
				e.BreakerProbe, note = true, "half-open breaker probe"
			}
		}
		e.History = []Transition{{At: now, From: "", To: string(e.Status), By: by, Note: note}}
		if e.Status.Settled() {
			e.ResolvedAt = now
		}
		e.foldNames()
		if err := tx.Create(s.entryRef(e.ID), e); err != nil {
			return err
		}
		if staged, err = s.notifyEntry(tx, e, "", now); err != nil {
			return err
		}
		if _, err := s.stageChange(tx, e); err != nil {
			return err
		}
		m := EntryMetrics(e)
		m.Tenants = tenantDelta(nil, e)
		m.Deaths = deathsOf(e)
		m.Outcomes = moveOutcomes(e, e.History)
		if err := s.addCounts(tx, Hour(e.CreatedAt), e.ID, m, now); err != nil {
			return err
		}
		res = RecordResult{Entry: e, Created: true, Breaker: b.State}
		s.wrote(1) // the entry
		if known {
			return nil
		}
		s.wrote(1) // the breaker
		seen = b
		b.UpdatedAt = now
		changed, err := s.notifyBreaker(tx, b)
		if err != nil {
			return err
		}
		staged = append(staged, changed...)
		return tx.Set(bref, b)
	}, firestore.WithCommitResponseTo(&commit))
	if err == nil && seen != nil {
		s.sawBreaker(seen)
	}
	if err == nil {
		res.Staged = stagedAt(staged, commit)
	}
	return res, err
}

func (s *Store) merge(ctx context.Context, in *Entry) (RecordResult, error) {
	var res RecordResult
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(s.entryRef(in.ID))
		s.read(1)
		if err != nil {
			// NotFound here means the entry vanished between the create and
			// the merge (TTL); the caller's retry creates it again.
			return err
		}
		cur, err := decodeEntry(snap)
		if err != nil {
			return err
		}
		res = RecordResult{Entry: cur}
		before := deathsOf(cur)
		var d Metrics
		switch was := *cur; {
		case cur.Tenant == in.Tenant, tenantUnknown(in):
			// The same tenant, or an event that knows none (an advisory
			// whose message was gone) and adds only what the advisory
			// says.
		case tenantUnknown(cur):
			// The entry moves to the tenant the event names, and so
			// does everything it was counted under as its tenant's.
			cur.Tenant = in.Tenant
			if cur.Agent == "" {
				cur.Agent = in.Agent
			}
			res.Retenanted = was.Tenant
			d.ByTenant = map[string]int64{was.Tenant: -1, cur.Tenant: 1}
			if cur.Agent != was.Agent {
				d.ByAgent = map[string]int64{was.Agent: -1, cur.Agent: 1}
			}
			d.Tenants = tenantDelta(&was, cur)
		default:
			res.Refused = fmt.Sprintf("the event names tenant %q, the entry belongs to tenant %q: not merged", in.Tenant, cur.Tenant)
			return nil
		}
		if !enrich(cur, in) && res.Retenanted == "" {
			return nil
		}
		cur.UpdatedAt = s.Now()
		res.Merged = true
		// The other capture path may bring what the predictions learn
		// the death by (the headers, the payload's size): the hour's
		// death cells follow the entry.
		addDeaths(&d.Deaths, deathsOf(cur), 1)
		addDeaths(&d.Deaths, before, -1)
		if len(d.Deaths) > 0 || len(d.ByTenant) > 0 {
			if err := s.addCounts(tx, Hour(cur.CreatedAt), cur.ID, d, cur.UpdatedAt); err != nil {
				return err
			}
		}
		cur.foldNames()
		s.wrote(1)
		return tx.Set(s.entryRef(in.ID), cur)
	})
	if err != nil {
		return RecordResult{}, txError("merge "+in.ID, err)
	}
	return res, nil
}

// tenantUnknown reports whether e was recorded without anything that names
// a tenant: from an advisory whose message was gone (no headers, no
// subject), so it could only be given the default tenant.
func tenantUnknown(e *Entry) bool { return len(e.Headers) == 0 && e.Subject == "" }

// enrich adds to cur what in knows and cur does not; it never changes the
// classification or status already acted on. It reports whether cur changed.
func enrich(cur, in *Entry) bool {
	changed := false
	for _, k := range in.Kinds {
		if !slices.Contains(cur.Kinds, k) {
			cur.Kinds = append(cur.Kinds, k)
			changed = true
		}
	}
	if cur.PayloadMissing && !in.PayloadMissing {
		cur.Payload, cur.PayloadChunkCount = in.Payload, in.PayloadChunkCount
		cur.PayloadSHA256, cur.PayloadSize, cur.PayloadMissing, cur.PayloadTruncated = in.PayloadSHA256, in.PayloadSize, false, false
		if cur.PublishedAt.IsZero() {
			cur.PublishedAt = in.PublishedAt
		}
		changed = true
	}
	if cur.Failure == nil && in.Failure != nil {
		cur.Failure = in.Failure
		changed = true
	}
	fill := func(dst *string, src string) {
		if *dst == "" && src != "" {
			*dst = src
			changed = true
		}
	}
	fill(&cur.TermReason, in.TermReason)
	fill(&cur.Consumer, in.Consumer)
	fill(&cur.Subject, in.Subject)
	fill(&cur.TaskID, in.TaskID)
	fill(&cur.TaskType, in.TaskType)
	fill(&cur.IdempotencyKey, in.IdempotencyKey)
	if len(cur.Headers) == 0 && len(in.Headers) > 0 {
		cur.Headers = in.Headers
		changed = true
	}
	if len(cur.InvalidNames) == 0 && len(in.InvalidNames) > 0 && cur.Tenant == in.Tenant {
		cur.InvalidNames, cur.TaskTenant = in.InvalidNames, in.TaskTenant
		changed = true
	}
	if in.Deliveries > cur.Deliveries {
		cur.Deliveries = in.Deliveries
		changed = true
	}
	return changed
}
