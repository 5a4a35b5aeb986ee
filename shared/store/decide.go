package store

import (
	"fmt"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file is the one mapping between the wire contract, the stored entry
// and the triage engine: classify, replay, reconcile and dlqctl all decide
// through it, so a policy test gives the answer replay will.

// NewEntry builds the entry of a dead message from its event; headers are
// the event's headers decoded (event.DecodeHeaders). Tenant and agent come
// from the event (the bridge applied the conventions); task id, type and
// idempotency key are read here by c.
func NewEntry(id string, ev event.Event, headers map[string][]string, c event.Conventions) *Entry {
	m := ev.Message
	e := &Entry{
		ID:               id,
		EventID:          ev.ID,
		Stream:           ev.Stream,
		Consumer:         ev.Consumer,
		StreamSeq:        int64(min(ev.StreamSeq, 1<<63-1)),
		Subject:          m.Subject,
		Tenant:           ev.Tenant,
		Agent:            ev.Agent,
		TaskID:           event.Header(headers, event.HeaderTaskID),
		TaskType:         c.TaskType(m.Subject, headers),
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
		if e.Agent == "" {
			e.Agent = f.Agent
		}
	}
	return e
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
		Failure: e.Failure,
	}, nil
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
		DelaySeconds:     d.Delay.Seconds(),
		Budget:           d.ReplayBudget,
		Instructions:     d.Modifications.Instructions,
		TargetModel:      d.Modifications.TargetModel,
		MaxContextTokens: d.Modifications.MaxContextTokens,
		MaxOutputTokens:  d.Modifications.MaxOutputTokens,
		AlternateAgent:   d.Modifications.AlternateAgent,
		AlternateSubject: d.Modifications.AlternateSubject,
		EscalateTo:       d.EscalateTo,
		Note:             d.Note,
	}
}

// Replay is what the replay of entry of under plan tells the agent in its
// Jsdlq-* headers (event.Replay.Set writes them). completed are the steps the
// failed attempt already made.
func (p Plan) Replay(of string, attempt int, strategy string, completed []string) event.Replay {
	return event.Replay{Of: of, Attempt: attempt, Strategy: strategy, Instructions: p.Instructions,
		TargetModel: p.TargetModel, MaxContextTokens: p.MaxContextTokens, MaxOutputTokens: p.MaxOutputTokens,
		CompletedSteps: completed}
}
