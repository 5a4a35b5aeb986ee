package operator

import (
	"context"
	"errors"
	"fmt"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// TriageAnswerer is the operator as a triage agent's answers reach it
// (agentkit.Kit.HandleTriage): an approve or replay answer is Approve with
// the answer's edits, a discard is Discard, each scoped to the task's
// tenant, so a triage agent meets the same gates and leaves the same
// history as a human. It acts in the triage_agent role: only where the
// entry's rule grants it (by default not for governance, poison or unknown
// commit state, which an approver decides); a refusal is
// agentkit.ErrTriageRefused. Outcomes are reported with agentkit's errors.
func (o *Operator) TriageAnswerer() agentkit.Answerer { return triageAnswerer{o} }

type triageAnswerer struct{ o *Operator }

func (t triageAnswerer) AnswerTriage(ctx context.Context, task jevent.TriageTask, a agentkit.TriageAnswer, name string) (string, error) {
	by := authority.Actor{Name: name, Role: authority.TriageAgent}
	var (
		status string
		err    error
	)
	switch a.Answer {
	case jevent.AnswerApprove, jevent.AnswerReplay:
		e, aerr := t.o.Approve(ctx, task.Tenant, task.EntryID, Edits{Payload: a.Payload, SetHeaders: a.SetHeaders, By: by, Asked: asked(task)})
		if e != nil {
			status = string(e.Status)
			if aerr != nil {
				return status, fmt.Errorf("%w: %w", agentkit.ErrTriageUnfinished, aerr)
			}
		}
		err = aerr
	case jevent.AnswerDiscard:
		e, derr := t.o.DiscardIn(ctx, task.Tenant, task.EntryID, a.Reason, by, asked(task))
		if e != nil {
			// Discarded; a breaker probe left unreleased reopens by itself.
			return string(e.Status), nil
		}
		err = derr
	default:
		return "", fmt.Errorf("%w: %q", agentkit.ErrBadAnswer, a.Answer)
	}
	switch {
	case err == nil:
		return status, nil
	case errors.Is(err, ErrWrongStatus):
		return "", fmt.Errorf("%w: %w", agentkit.ErrTriageDecided, err)
	case errors.Is(err, ErrNotFound):
		return "", fmt.Errorf("%w: %w", agentkit.ErrTriageNotFound, err)
	case errors.Is(err, ErrPayloadMissing), errors.Is(err, ErrBadEdit), errors.Is(err, ErrNoActor), errors.Is(err, ErrPermissionDenied):
		return "", fmt.Errorf("%w: %w", agentkit.ErrTriageRefused, err)
	}
	return "", err
}

// asked is the decision the triage task asked about: the status, and the
// moment the entry entered it (the task's At is its notification's, made
// in the move's transaction). The answer applies to that decision only: a
// redelivered answer finds the entry moved on, one to an escalation does
// not approve a later quarantine, nor a later escalation of the same entry.
func asked(task jevent.TriageTask) Asked {
	return Asked{Only: []store.Status{store.Status(task.Status)}, EnteredAt: task.At}
}
