package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file is the one mapping between the wire contract, the stored entry
// and the triage engine: classify, replay, reconcile and dlqctl all decide
// through it, so a policy test gives the answer replay will.

// NewEntry builds the entry of a dead message from its event; headers are
// the event's headers decoded (event.DecodeHeaders). Tenant and agent come
// from the event (the bridge applied the conventions), checked again by the
// naming rule (namesOf); task id, type and idempotency key are read here by
// c.
func NewEntry(id string, ev event.Event, headers map[string][]string, c event.Conventions) *Entry {
	m := ev.Message
	n := namesOf(ev, headers, c)
	e := &Entry{
		ID:               id,
		EventID:          ev.ID,
		Stream:           ev.Stream,
		Consumer:         ev.Consumer,
		StreamSeq:        int64(min(ev.StreamSeq, 1<<63-1)),
		Subject:          m.Subject,
		Tenant:           n.Tenant,
		Agent:            n.Agent,
		InvalidNames:     n.Invalid,
		TaskID:           event.Header(headers, event.HeaderTaskID),
		TaskType:         n.TaskType,
		IdempotencyKey:   c.IdempotencyKey(headers),
		Headers:          m.Headers, // as carried by the event: UTF-8 safe
		Payload:          m.Data,
		PayloadMissing:   m.Missing || m.Truncated,
		PayloadTruncated: m.Truncated,
		Kind:             string(ev.Kind),
	}
	if m.Missing || m.Truncated {
		e.Payload, e.PayloadSize, e.PayloadSHA256 = nil, m.Size, m.SHA256
	}
	if m.PublishedAt != nil {
		e.PublishedAt = *m.PublishedAt
	}
	if a := ev.Advisory; a != nil {
		e.Deliveries = int(min(a.Deliveries, 1<<31-1))
		e.TermReason = a.Reason
		if e.Consumer == "" {
			e.Consumer = a.Consumer
		}
	}
	if f := ev.Failure; f != nil {
		cp := *f
		e.Failure = &cp
	}
	if e.Tenant == event.ReservedTenant && len(headers) > 0 {
		// The agent's kit names the task by the tenant header as sent,
		// whatever jsdlq records it under.
		if t := c.Tenant(headers); utf8.ValidString(t) && len(t) <= event.KeptNameBytes {
			e.TaskTenant = t
		}
	}
	return e
}

// namesOf are the names the entry of ev is recorded under (the naming
// rule, event.CheckNames): an event is wire data too, so the tenant and
// agent the bridge put in it are checked again, the agent of the failure
// record standing in for an agent the event does not name. An event the
// bridge put under the reserved tenant is read again from its headers,
// which keep the names the task carried.
func namesOf(ev event.Event, headers map[string][]string, c event.Conventions) event.Names {
	failureAgent := ""
	if ev.Failure != nil {
		failureAgent = ev.Failure.Agent
	}
	if ev.Tenant == event.ReservedTenant {
		if n := c.Names(ev.Message.Subject, headers, failureAgent); len(n.Invalid) > 0 {
			return n
		}
	}
	agent := ev.Agent
	if agent == "" {
		agent = failureAgent
	}
	return event.CheckNames(ev.Tenant, agent, c.TaskType(ev.Message.Subject, headers))
}

// PolicyInput is what the triage engine knows about the entry: the one
// place its input is built.
func (e *Entry) PolicyInput() (triage.Input, error) {
	headers, err := event.DecodeHeaders(e.Headers)
	if err != nil {
		return triage.Input{}, fmt.Errorf("store: headers of entry %s: %w", e.ID, err)
	}
	return triage.Input{
		Kind: e.Kind, Stream: e.Stream, Subject: e.Subject, Tenant: e.Tenant, Agent: e.Agent,
		TaskType: e.TaskType, Headers: headers, TermReason: e.TermReason, Deliveries: e.Deliveries,
		Failure: e.Failure, IdempotencyKey: e.IdempotencyKey,
	}, nil
}

// Decide records the policy's decision d on a new entry: classification,
// plan and the status the action leads to; a replay is due now + the
// strategy's delay under the task name of its first attempt (chosen before
// the entry is written, so it is written once).
func (e *Entry) Decide(d triage.Decision, now time.Time) {
	e.Classify(d)
	e.Strategy, e.Plan = d.Strategy, PlanOf(d)
	e.Status = StatusFor(d.Action)
	if e.Status == Scheduled {
		e.NextRetryAt = now.UTC().Add(d.Delay)
		e.TaskName = tasks.Name(e.ID, e.Replays+1)
	}
}

// Classify records the classification in d: category, reason code and its
// route, the rule that matched, its action and the policy's version. Decide
// records it on a new entry, replay's re-evaluation on the entry it claimed,
// so an entry the current policy puts in an opt-in category (governance,
// poison, unknown_commit_state) is in that category for every gate that asks
// (a redrive's opt-ins, the console, the tenant-hour counters).
func (e *Entry) Classify(d triage.Decision) {
	e.Category, e.ReasonCode, e.ReasonRoute, e.Rule = string(d.Category), d.ReasonCode, d.Route, d.Rule
	e.Action, e.PolicyVersion = string(d.Action), d.PolicyVersion
}

// LinkReplay links a new entry whose message is a replay (its
// Jsdlq-Replay-Of header, in the decoded headers) to the entry it replays:
// the parent's chain plus the parent itself, so the policy judges the whole
// chain with one read. A header that names no entry, the entry itself, or an
// entry of another tenant or task (forged or stale) starts a new chain
// instead; unlinked says why, for the caller's log ("" when linked or not a
// replay). Record then hands the parent's completion check to the new entry
// (handOffCheck).
func (s *Store) LinkReplay(ctx context.Context, e *Entry, headers map[string][]string) (chain triage.Chain, unlinked string, err error) {
	ref := strings.TrimSpace(event.Header(headers, event.HeaderReplayOf))
	if ref == "" {
		return triage.Chain{}, "", nil
	}
	// The header may carry the event id (encoded here) or the entry id
	// itself; only a value that is one of the two is looked up. Anything
	// else names no entry: a document path Firestore refuses would
	// otherwise fail the read for good, and the retried event would never
	// become an entry.
	var ids []string
	if enc, err := EntryID(ref); err == nil {
		ids = append(ids, enc)
	}
	if _, err := EventID(ref); err == nil && !slices.Contains(ids, ref) {
		ids = append(ids, ref)
	}
	var parent *Entry
	err = fmt.Errorf("%w: no entry id in the header", ErrNotFound)
	for _, id := range ids {
		if parent, err = s.GetMeta(ctx, id); !errors.Is(err, ErrNotFound) {
			break
		}
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return triage.Chain{}, "replay parent " + ref + " not found; a new chain starts", nil
	case err != nil:
		return triage.Chain{}, "", fmt.Errorf("store: read replay parent %s of %s: %w", ref, e.ID, err)
	case parent.ID == e.ID:
		return triage.Chain{}, "the entry claims to replay itself; ignored", nil
	case parent.Tenant != e.Tenant:
		// Only a forged header names another tenant's entry: a replay
		// keeps its tenant's headers. Linking would let one tenant's
		// recovery move another's entries (recoverChain).
		return triage.Chain{}, fmt.Sprintf("replay parent %s belongs to another tenant; a new chain starts", parent.ID), nil
	case !sameTask(parent, e):
		return triage.Chain{}, fmt.Sprintf("replay parent %s is another task (idempotency key %q, not %q); a new chain starts",
			parent.ID, parent.IdempotencyKey, e.IdempotencyKey), nil
	}
	e.ReplayOf, e.RootID = parent.ID, parent.RootID
	e.parent = parent
	e.ChainCodes = append(slices.Clone(parent.ChainCodes), parent.ReasonCode)
	e.ChainStrategies = append(slices.Clone(parent.ChainStrategies), parent.Strategy)
	return e.PolicyChain(), "", nil
}

// PolicyChain is what the entry's replay chain tells the engine.
func (e *Entry) PolicyChain() triage.Chain {
	return triage.Chain{Codes: e.ChainCodes, Strategies: e.ChainStrategies}
}

// StatusFor is the status an entry waits in when the policy decides a; the
// one status rule for new entries (classify) and re-evaluated ones
// (replay). Manual review waits for an operator's approval after the
// compensating read; an action the store does not know escalates.
func StatusFor(a triage.Action) Status {
	switch a {
	case triage.AutoReplay:
		return Scheduled
	case triage.Quarantine:
		return Quarantined
	case triage.RequireApproval, triage.ManualReview:
		return AwaitingApproval
	case triage.Discard:
		return Discarded
	default:
		return Escalated
	}
}

// PlanOf is the stored form of what a policy decision asks of a replay.
func PlanOf(d triage.Decision) Plan {
	return Plan{
		DelaySeconds:  d.Delay.Seconds(),
		Budget:        d.ReplayBudget,
		Modifications: d.Modifications,
		EscalateTo:    d.EscalateTo,
		Note:          d.Note,
		// The policy's retention is whole hours (triage.ParseRetention).
		RetentionHours: int(d.Retention / time.Hour),
		FeedPayload:    d.FeedPayload,
	}
}
