package agentkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
)

// This file is the triage agent's side of an escalation: jsdlq sends an
// escalated or awaiting-approval entry's triage task (jsdlq.triage.v1) to
// the triage agent's subject, and the agent answers approve (with payload or
// header edits), replay or discard. The answer is applied by the operator
// package (operator.Operator.TriageAnswerer), under the same gates and with
// the same history as a human's, the actor recorded as "agent:<name>".

// Errors of the triage answer API.
var (
	// ErrBadTriage: the message is not a valid triage task (malformed,
	// another schema, headers that disagree with the body).
	ErrBadTriage = errors.New("agentkit: not a valid triage task")
	// ErrBadAnswer: the answer is not one the task offers, or lacks what
	// it needs (a discard without a reason).
	ErrBadAnswer = errors.New("agentkit: invalid triage answer")
	// ErrTriageDecided: the entry is no longer waiting for this decision;
	// it was answered already (an earlier delivery of the same task, a
	// human) or moved on. Nothing was changed.
	ErrTriageDecided = errors.New("agentkit: the entry was decided already")
	// ErrTriageNotFound: no entry of the task's tenant has the task's
	// entry id (it expired, or the task names another tenant's entry).
	ErrTriageNotFound = errors.New("agentkit: the triage task's entry does not exist in its tenant")
	// ErrTriageRefused: the operator package refused the answer for good
	// (for example an approval of an entry without a payload); the entry
	// stays where it is, with the humans its notification reached.
	ErrTriageRefused = errors.New("agentkit: triage answer refused")
	// ErrTriageUnfinished: the answer is recorded on the entry, but the
	// replay task it asks for was not created; reconcile creates it.
	ErrTriageUnfinished = errors.New("agentkit: triage answer recorded, its replay task left to reconcile")
	// ErrPermissionDenied: the policy does not let the triage agent decide
	// on this entry (its rule does not grant triage_agent); the entry waits
	// for its approvers. It is authority's sentinel, named here so that an
	// agent tells it apart with the kit alone.
	ErrPermissionDenied = authority.ErrPermissionDenied
)

// TriageAnswer is a triage agent's decision on one entry.
type TriageAnswer struct {
	// Answer is event.AnswerApprove, event.AnswerReplay or
	// event.AnswerDiscard, one of the task's Answers.
	Answer string
	// Payload is what the replay carries (approve, replay): a new version
	// of the entry's payload, the stored ones kept; nil keeps the one the
	// entry replays. An empty or blank payload, or one that is not JSON
	// where the one it edits is, is refused (ErrTriageRefused): an answer
	// cannot confirm that risk, a human can.
	Payload []byte
	// SetHeaders sets headers of the replay (approve, replay); names
	// JetStream or jsdlq own (Nats-*, Jsdlq-*), and the task's identity
	// (tenant, idempotency key, task id and version), are refused.
	SetHeaders map[string]string
	// Reason says why (required for a discard).
	Reason string
}

// Approve is the answer that approves the proposed replay, with optional
// edits (nil payload keeps the stored one).
func Approve(payload []byte, setHeaders map[string]string) TriageAnswer {
	return TriageAnswer{Answer: event.AnswerApprove, Payload: payload, SetHeaders: setHeaders}
}

// ReplayAnswer is the answer that replays an escalated entry now, with
// optional edits.
func ReplayAnswer(payload []byte, setHeaders map[string]string) TriageAnswer {
	return TriageAnswer{Answer: event.AnswerReplay, Payload: payload, SetHeaders: setHeaders}
}

// Discard is the answer that ends the entry, for reason.
func Discard(reason string) TriageAnswer {
	return TriageAnswer{Answer: event.AnswerDiscard, Reason: reason}
}

// Answerer applies a triage answer to the task's entry as actor by, within
// the task's tenant, and returns the entry's new status. The operator
// package implements it (operator.Operator.TriageAnswerer) and reports
// its outcomes with this file's errors.
type Answerer interface {
	AnswerTriage(ctx context.Context, task event.TriageTask, a TriageAnswer, by string) (status string, err error)
}

// TriageOf reads the triage task msg carries (ParseTriage).
func TriageOf(msg jetstream.Msg) (event.TriageTask, error) {
	return ParseTriage(msg.Headers(), msg.Data())
}

// ParseTriage decodes a triage task from a message's headers and body and
// checks it (CheckTriage), and that the headers naming the entry and its
// tenant agree with the body (a message whose headers name one entry and
// body another is refused, not guessed at).
func ParseTriage(h map[string][]string, data []byte) (event.TriageTask, error) {
	var t event.TriageTask
	if err := json.Unmarshal(data, &t); err != nil {
		return event.TriageTask{}, fmt.Errorf("%w: body: %v", ErrBadTriage, err)
	}
	if err := CheckTriage(t); err != nil {
		return event.TriageTask{}, err
	}
	bad := func(format string, a ...any) (event.TriageTask, error) {
		return event.TriageTask{}, fmt.Errorf("%w: entry %q: %s", ErrBadTriage, t.EntryID, fmt.Sprintf(format, a...))
	}
	if v := event.Header(h, event.HeaderTriageEntry); v != t.EntryID {
		return bad("header %s is %q, the body names %q", event.HeaderTriageEntry, v, t.EntryID)
	}
	if v := event.Header(h, event.HeaderTenant); v != "" && v != t.Tenant {
		return bad("header %s is %q, the body's tenant is %q", event.HeaderTenant, v, t.Tenant)
	}
	return t, nil
}

// CheckTriage checks a triage task's body: the schema, and the fields an
// answer needs (the console's triage endpoint checks the task it is sent
// with it too).
func CheckTriage(t event.TriageTask) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: entry %q: %s", ErrBadTriage, t.EntryID, fmt.Sprintf(format, a...))
	}
	switch {
	case t.Schema != event.TriageSchema:
		return bad("schema %q, want %q", t.Schema, event.TriageSchema)
	case t.EntryID == "" || t.Tenant == "" || t.Status == "":
		return bad("entry_id, tenant and status are required")
	case len(t.Answers) == 0:
		return bad("no answers offered")
	}
	for _, a := range t.Answers {
		if a != event.AnswerApprove && a != event.AnswerReplay && a != event.AnswerDiscard {
			return bad("unknown answer %q offered", a)
		}
	}
	return nil
}

// Check reports whether a is an answer task offers, complete.
func (a TriageAnswer) Check(task event.TriageTask) error {
	if !slices.Contains(task.Answers, a.Answer) {
		return fmt.Errorf("%w: %q to entry %s, which offers %v", ErrBadAnswer, a.Answer, task.EntryID, task.Answers)
	}
	if a.Answer == event.AnswerDiscard && strings.TrimSpace(a.Reason) == "" {
		return fmt.Errorf("%w: a discard of entry %s needs a reason", ErrBadAnswer, task.EntryID)
	}
	return nil
}

// TriageActor is the actor a triage agent's answers are recorded as.
func TriageActor(agent string) string { return "agent:" + agent }

// Answer applies a to task's entry through op, as this kit's agent (the
// task's triage agent when the kit has no name).
func (k *Kit) Answer(ctx context.Context, op Answerer, task event.TriageTask, a TriageAnswer) (status string, err error) {
	if err := a.Check(task); err != nil {
		return "", err
	}
	agent := k.agent
	if agent == "" {
		agent = event.TriageAgent(task.Agent)
	}
	return op.AnswerTriage(ctx, task, a, TriageActor(agent))
}

// TriageOutcome is what HandleTriage did with a triage task message.
type TriageOutcome string

// Triage outcomes.
const (
	TriageAnswered  TriageOutcome = "answered"        // applied, message acked
	TriageDecided   TriageOutcome = "already_decided" // nothing to do (a redelivery, a human was first), acked
	TriageRefused   TriageOutcome = "refused"         // the answer cannot be applied; acked, the entry stays with a human
	TriageMalformed TriageOutcome = "malformed"       // terminated through Terminate: it becomes an entry of its own
	TriageRetry     TriageOutcome = "retry"           // NAKed: a redelivery asks again
)

// Decide is a triage agent's judgement of one task.
type Decide func(ctx context.Context, task event.TriageTask) (TriageAnswer, error)

// HandleTriage answers one triage task message and settles it:
//
//   - a malformed task is terminated through Terminate (schema_invalid), so
//     it is recorded like any dead task and a human sees it;
//   - decide runs kept alive (KeepAlive); its error NAKs the message with
//     the consumer's backoff;
//   - the answer goes through op; applied (or found decided already: a
//     redelivered task, a human who answered first) it is acked; refused
//     for good it is acked too, the entry staying with the humans its
//     notification reached; a failure a retry can help NAKs.
//
// The error says what went wrong when the outcome is not TriageAnswered
// (TriageUnfinished answers return ErrTriageUnfinished with the outcome
// answered).
func (k *Kit) HandleTriage(ctx context.Context, msg jetstream.Msg, op Answerer, decide Decide) (TriageOutcome, error) {
	task, err := TriageOf(msg)
	if err != nil {
		terr := k.Terminate(ctx, msg, Failure{Code: "schema_invalid", Detail: err.Error()})
		return TriageMalformed, errors.Join(err, terr)
	}
	// A decision may take a model longer than the consumer's AckWait: the
	// task is kept alive while decide runs.
	var a TriageAnswer
	err = k.KeepAlive(ctx, msg, func(ctx context.Context) error {
		var err error
		a, err = decide(ctx, task)
		return err
	})
	if err != nil {
		return TriageRetry, errors.Join(fmt.Errorf("agentkit: decide on entry %s: %w", task.EntryID, err), k.nakMsg(ctx, msg))
	}
	_, err = k.Answer(ctx, op, task, a)
	switch {
	case err == nil:
		return TriageAnswered, msg.Ack()
	case errors.Is(err, ErrTriageUnfinished):
		return TriageAnswered, errors.Join(err, msg.Ack())
	case errors.Is(err, ErrTriageDecided):
		return TriageDecided, errors.Join(err, msg.Ack())
	case errors.Is(err, ErrBadAnswer), errors.Is(err, ErrTriageRefused), errors.Is(err, ErrTriageNotFound):
		return TriageRefused, errors.Join(err, msg.Ack())
	}
	return TriageRetry, errors.Join(err, k.nakMsg(ctx, msg))
}

func (k *Kit) nakMsg(ctx context.Context, msg jetstream.Msg) error {
	md, err := msg.Metadata()
	if err != nil {
		return errors.Join(err, msg.Nak())
	}
	return k.nak(ctx, msg, md)
}
