package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
)

// Demo headers that drive the fake work.
const (
	HeaderFail          = "X-Demo-Fail"             // failure mode, see modes
	HeaderFailProb      = "X-Demo-Fail-Probability" // 0..1, default 1
	HeaderFailCode      = "X-Demo-Fail-Code"        // overrides the mode's reason code
	HeaderContextTokens = "X-Demo-Context-Tokens"   // context the task needs (context_window_overflow)
	HeaderWorkTime      = "X-Demo-Work-Time"        // how long the fake work takes (a Go duration), instead of --work-time
)

// Failure modes. A replay that carries the strategy's modification headers
// (docs/contracts.md, "Message headers") succeeds where the original failed,
// as a real agent would.
const (
	ModeNone          = "none"
	ModeTransient     = "transient"               // Fail (NAK) on every original delivery; a replay succeeds
	ModeContext       = "context_window_overflow" // pre-flight refuses; succeeds with Jsdlq-Max-Context-Tokens or a larger model
	ModeHallucination = "hallucination_loop"      // succeeds with Jsdlq-Instruction or Jsdlq-Target-Model
	ModeTokenBudget   = "token_budget_exceeded"   // succeeds with Jsdlq-Max-Output-Tokens
	ModePermanent     = "permanent"               // impossible_task, always
	ModePoison        = "poison"                  // payload_unmarshal_failed unless the payload is JSON
	ModeGovernance    = "governance"              // approval_required, always
	ModePartial       = "partial_write"           // unknown_commit_state with a completed step
	ModeBareTerm      = "bare_term"               // TERM without agentkit: the payload is lost on WorkQueue streams
	ModeSilent        = "silent"                  // NAK without a failure record: max deliveries, reason unknown
)

var modes = []string{ModeNone, ModeTransient, ModeContext, ModeHallucination, ModeTokenBudget, ModePermanent,
	ModePoison, ModeGovernance, ModePartial, ModeBareTerm, ModeSilent}

// Agent does fake work for tasks of one agent name.
type Agent struct {
	Name          string
	Kit           *agentkit.Kit
	Log           *slog.Logger
	DefaultMode   string  // when a task has no X-Demo-Fail
	DefaultProb   float64 // when a task has no X-Demo-Fail-Probability
	ContextWindow int     // tokens of the agent's model
	WorkTime      time.Duration
	Idempotent    bool // use Kit.Once (needs Firestore)
	Rand          *rand.Rand
	// Triage, when set, makes the agent a triage agent: it answers the
	// dlq_triage tasks it receives through agentkit (HandleTriage).
	Triage agentkit.Answerer
}

// Steps are the fake work of every task, in order. A failure records the
// steps it completed (agentkit.Failure.CompletedSteps); the replay carries
// them (Jsdlq-Completed-Steps) and the agent skips them.
var Steps = []string{"gather_context", "draft", "deliver"}

// SkippedSteps are the steps of Steps a replay says are done already.
func SkippedSteps(m jetstream.Msg) []string {
	done := agentkit.ReplayOf(m).CompletedSteps
	var out []string
	for _, s := range Steps {
		if slices.Contains(done, s) {
			out = append(out, s)
		}
	}
	return out
}

// Outcome is what Handle did with a task, for logs and tests.
type Outcome string

// Outcomes.
const (
	Done       Outcome = "done"
	Skipped    Outcome = "skipped_completed"
	Failed     Outcome = "failed_nak"
	Terminated Outcome = "terminated"
	Busy       Outcome = "in_progress_elsewhere"
	// Lost: the task's claim was lost mid-work; the message is left
	// unsettled for the server to redeliver (agentkit.ErrClaimLost).
	Lost Outcome = "claim_lost"
)

func header(m jetstream.Msg, name string) string { return event.Header(m.Headers(), name) }

func isReplayFixed(m jetstream.Msg, names ...string) bool {
	for _, n := range names {
		if header(m, n) != "" {
			return true
		}
	}
	return false
}

// Handle processes one task message and always settles it (ack, NAK or TERM).
func (a *Agent) Handle(ctx context.Context, m jetstream.Msg) (Outcome, error) {
	mode := header(m, HeaderFail)
	if mode == "" {
		mode = a.DefaultMode
	}
	prob := a.DefaultProb
	if v := header(m, HeaderFailProb); v != "" {
		if p, err := strconv.ParseFloat(v, 64); err == nil {
			prob = p
		}
	}
	fails := mode != "" && mode != ModeNone && a.Rand.Float64() < prob
	code := func(def string) string {
		if c := header(m, HeaderFailCode); c != "" {
			return c
		}
		return def
	}
	replay := header(m, event.HeaderReplayOf) != ""

	if fails {
		switch mode {
		case ModeTransient:
			if !replay {
				return Failed, a.Kit.Fail(ctx, m, agentkit.Failure{Code: code("llm_provider_timeout"), Detail: "provider did not answer in 60s",
					CompletedSteps: Steps[:1]})
			}
		case ModeContext:
			window := a.ContextWindow
			if header(m, event.HeaderTargetModel) != "" {
				window *= 4 // a larger-context model
			}
			need := 2 * a.ContextWindow
			if v, err := strconv.Atoi(header(m, HeaderContextTokens)); err == nil && v > 0 {
				need = v
			}
			// A replay's Jsdlq-Max-Context-Tokens makes the agent compress
			// its context to that many tokens.
			if c := agentkit.BudgetFromHeaders(m.Headers(), 0).MaxTokens; c > 0 && c < need {
				need = c
			}
			prompt := strings.Repeat("tokn", need) // ≈ need tokens
			if _, err := a.Kit.Preflight(agentkit.Budget{MaxTokens: window}, prompt); err != nil {
				var oe *agentkit.OverflowError
				if errors.As(err, &oe) {
					return Terminated, a.Kit.Terminate(ctx, m, oe.Failure())
				}
				return Failed, err
			}
		case ModeHallucination:
			if !isReplayFixed(m, event.HeaderInstruction, event.HeaderTargetModel) {
				return Terminated, a.Kit.Terminate(ctx, m, agentkit.Failure{Code: code("hallucination_loop"),
					Detail: "the same tool call repeated 5 times with invented arguments", CompletedSteps: nil})
			}
		case ModeTokenBudget:
			if !isReplayFixed(m, event.HeaderMaxOutputTokens) {
				return Terminated, a.Kit.Terminate(ctx, m, agentkit.Failure{Code: code("token_budget_exceeded"),
					Detail: "output budget of 4000 tokens exhausted while drafting", CompletedSteps: Steps[:1]})
			}
		case ModePermanent:
			return Terminated, a.Kit.Terminate(ctx, m, agentkit.Failure{Code: code("impossible_task"), Detail: "the repository does not exist"})
		case ModePoison:
			if !json.Valid(m.Data()) {
				return Terminated, a.Kit.Terminate(ctx, m, agentkit.Failure{Code: code("payload_unmarshal_failed"), Detail: "payload is not JSON"})
			}
		case ModeGovernance:
			return Terminated, a.Kit.Terminate(ctx, m, agentkit.Failure{Code: code("approval_required"), Detail: "production deploy needs approval"})
		case ModePartial:
			return Terminated, a.Kit.Terminate(ctx, m, agentkit.Failure{Code: code("partial_external_write"),
				Detail: "tool call failed after the PR comment was posted", CompletedSteps: []string{"post_pr_comment"}})
		case ModeBareTerm:
			return Terminated, m.TermWithReason(code("impossible_task") + ": terminated without agentkit")
		case ModeSilent:
			return Failed, m.Nak()
		default:
			a.Log.Warn("unknown demo failure mode; treating the task as healthy", "mode", mode)
		}
	}
	return a.complete(ctx, m)
}

// task is m's task for Once: a message without an idempotency key is keyed
// by its stream and sequence, so its redeliveries still run once.
func (a *Agent) task(m jetstream.Msg) agentkit.Task {
	t := agentkit.TaskOf(m)
	if t.Key != "" {
		return t
	}
	if md, err := m.Metadata(); err == nil {
		t.Key = event.ID(md.Stream, md.Sequence.Stream)
	}
	return t
}

// workTime is how long m's fake work takes: its X-Demo-Work-Time, else
// the agent's.
func (a *Agent) workTime(m jetstream.Msg) time.Duration {
	if d, err := time.ParseDuration(header(m, HeaderWorkTime)); err == nil && d > 0 {
		return d
	}
	return a.WorkTime
}

// complete does m's work and settles it. The work is kept alive (agentkit
// sends in-progress acks and renews Once's claim), so a task longer than
// the consumer's AckWait is neither redelivered mid-work nor run twice.
func (a *Agent) complete(ctx context.Context, m jetstream.Msg) (Outcome, error) {
	skip := SkippedSteps(m)
	perStep := a.workTime(m) / time.Duration(len(Steps))
	work := func(ctx context.Context) error {
		for _, step := range Steps {
			if slices.Contains(skip, step) {
				continue // done by the attempt that failed
			}
			select {
			case <-time.After(perStep):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	if !a.Idempotent {
		if err := a.Kit.KeepAlive(ctx, m, work); err != nil {
			return Failed, errors.Join(err, m.Nak())
		}
		return Done, m.Ack()
	}
	ran, err := a.Kit.Once(ctx, a.task(m), work)
	switch {
	case errors.Is(err, agentkit.ErrClaimLost):
		return Lost, nil // neither ack nor NAK: the server redelivers it (ErrClaimLost says why)
	case errors.Is(err, agentkit.ErrInProgress):
		return Busy, m.NakWithDelay(5 * time.Second)
	case err != nil:
		return Failed, errors.Join(err, m.NakWithDelay(time.Second))
	case !ran:
		return Skipped, m.Ack()
	}
	if err := m.Ack(); err != nil {
		return Done, fmt.Errorf("ack after completion (a redelivery will be skipped): %w", err)
	}
	return Done, nil
}

// DecideTriage is the demo's triage agent ("ceo"): deterministic, from the
// task alone. An impossible task is discarded; what a human can fix (a
// filter rejection, a provider that never answered) is fixed — the
// X-Demo-Fail: none header edit stands for the repair — and replayed (an
// escalated entry) or approved (one awaiting approval).
func DecideTriage(_ context.Context, t event.TriageTask) (agentkit.TriageAnswer, error) {
	fix := map[string]string{HeaderFail: ModeNone}
	switch {
	case t.Reason == "impossible_task":
		return agentkit.Discard("impossible task, nothing to fix: " + t.Summary), nil
	case slices.Contains(t.Answers, event.AnswerApprove):
		return agentkit.Approve(nil, fix), nil
	}
	return agentkit.ReplayAnswer(nil, fix), nil
}

// IsTriage reports whether m is a triage task.
func IsTriage(m jetstream.Msg) bool { return header(m, event.HeaderTaskType) == event.TriageTaskType }

// HandleTriage answers a triage task through agentkit and a.Triage (the
// console's triage endpoint, agentkit.TriageClient). An answer refused for good (a replay of an entry
// without its payload) becomes a discard that says why, so no entry waits
// on an answer that cannot come. An entry the policy keeps from the triage
// agent (its rule does not grant triage_agent) is left to its approvers.
func (a *Agent) HandleTriage(ctx context.Context, m jetstream.Msg) (agentkit.TriageOutcome, error) {
	out, err := a.Kit.HandleTriage(ctx, m, a.Triage, DecideTriage)
	if out != agentkit.TriageRefused || !errors.Is(err, agentkit.ErrTriageRefused) || errors.Is(err, agentkit.ErrPermissionDenied) {
		return out, err
	}
	task, perr := agentkit.TriageOf(m)
	if perr != nil {
		return out, errors.Join(err, perr)
	}
	if _, derr := a.Kit.Answer(ctx, a.Triage, task, agentkit.Discard("cannot replay: "+err.Error())); derr != nil {
		return out, errors.Join(err, derr)
	}
	return agentkit.TriageAnswered, nil
}
