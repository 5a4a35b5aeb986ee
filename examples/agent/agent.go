package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
)

// Outcomes of one message, for the log.
const (
	Done       = "done"       // the work ran now and its completion is recorded
	Skipped    = "skipped"    // the task had already completed: acked, not run again
	Failed     = "failed"     // a retryable failure, recorded; the server redelivers
	Terminated = "terminated" // a failure no retry fixes, copied to the DLQ and terminated
	Triaged    = "triaged"    // a dlq_triage task, answered
)

// ErrUnavailable is a failure a retry may fix (the model provider did not
// answer); other errors of Work are permanent.
var ErrUnavailable = errors.New("agent: the model is unavailable")

// Work is the agent's work on one task: the text and the limits the
// replay's strategy set.
type Work func(ctx context.Context, text string, replay event.Replay) error

// Agent handles one task at a time through the kit.
type Agent struct {
	Kit *agentkit.Kit
	// Window is the model's context window in tokens.
	Window int
	Work   Work
	// Triage answers dlq_triage tasks; nil leaves them to the server's
	// redelivery and, in the end, to the operators.
	Triage agentkit.Answerer
}

// Handle runs one message and settles it (ack, NAK or terminate).
func (a *Agent) Handle(ctx context.Context, m jetstream.Msg) (string, error) {
	if event.Header(m.Headers(), event.HeaderTaskType) == event.TriageTaskType {
		return a.handleTriage(ctx, m)
	}
	text := string(m.Data())
	replay := agentkit.ReplayOf(m)
	// A replay may carry a smaller budget (Jsdlq-Max-Context-Tokens): the
	// pre-flight checks the task against it before any token is spent.
	if _, err := a.Kit.Preflight(agentkit.BudgetFromHeaders(m.Headers(), a.Window), text); err != nil {
		var over *agentkit.OverflowError
		if errors.As(err, &over) {
			return Terminated, a.Kit.Terminate(ctx, m, over.Failure())
		}
		return Failed, err
	}
	ran, err := a.Kit.Once(ctx, agentkit.TaskOf(m), func(ctx context.Context) error {
		return a.Work(ctx, text, replay)
	})
	switch {
	case errors.Is(err, ErrUnavailable):
		if ferr := a.Kit.Fail(ctx, m, agentkit.Failure{Code: "provider_unavailable", Detail: err.Error()}); ferr != nil {
			return Failed, errors.Join(err, ferr)
		}
		md, _ := m.Metadata()
		return Failed, m.NakWithDelay(a.Kit.Backoff(ctx, md))
	case err != nil:
		retryable := false
		return Terminated, a.Kit.Terminate(ctx, m, agentkit.Failure{Code: "impossible_task", Detail: err.Error(), Retryable: &retryable})
	case !ran:
		return Skipped, m.Ack()
	}
	return Done, m.Ack()
}

// handleTriage answers a triage task: jsdlq asks because the entry needs a
// decision it is not allowed to make alone (the policy escalated it, or it
// waits for approval).
func (a *Agent) handleTriage(ctx context.Context, m jetstream.Msg) (string, error) {
	if a.Triage == nil {
		return Failed, m.NakWithDelay(time.Minute)
	}
	out, err := a.Kit.HandleTriage(ctx, m, a.Triage, decide)
	if err != nil {
		return string(out), err
	}
	return Triaged, nil
}

// decide discards what no replay can fix and replays (or approves) the rest
// unchanged: a real triage agent would ask its model here.
func decide(_ context.Context, t event.TriageTask) (agentkit.TriageAnswer, error) {
	if t.Reason == "impossible_task" {
		return agentkit.Discard("nothing to fix: " + t.Summary), nil
	}
	for _, answer := range t.Answers {
		if answer == event.AnswerApprove {
			return agentkit.Approve(nil, nil), nil
		}
	}
	return agentkit.ReplayAnswer(nil, nil), nil
}

// summarise is the example's work: a summary of the text's first sentence,
// within the output budget a replay may set. An empty text is permanent.
func summarise(ctx context.Context, text string, replay event.Replay) error {
	text = strings.TrimSpace(text)
	if text == "" {
		return errors.New("nothing to summarise")
	}
	first, _, _ := strings.Cut(text, ".")
	limit := 200
	if replay.MaxOutputTokens > 0 {
		limit = min(limit, replay.MaxOutputTokens*4)
	}
	summary := first[:min(len(first), limit)]
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	default:
	}
	_ = summary // a real agent publishes or stores its result here
	return nil
}
