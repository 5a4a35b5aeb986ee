// Package replay is the replay function (docs/replay.md): Cloud Tasks calls it
// with {"entry_id","attempt"} when a failure-log entry's replay is due, and it
// republishes the dead task to its JetStream work stream, modified by the
// entry's strategy.
//
// Cloud Tasks delivers at least once and the function may die anywhere, so
// every step converges on retry:
//
//  1. claim the entry (scheduled -> replaying) in a transaction, recording
//     the claiming task; a redelivery of the same task finds the entry
//     replaying under its own name and continues, or recovered under it and
//     finishes the recovery's later steps; any other task or status is
//     answered 200 and nothing happens;
//  2. a completion record in task-idempotency -> recovered, no publish;
//  3. the payload must exist (else escalated, payload_missing);
//  4. the current policy is asked again unless an operator approved this
//     replay (an approval answers the policy, nothing else): denied ->
//     awaiting_approval; the tenant breaker is asked always: open -> held,
//     half-open -> only the probe goes;
//  5. publish with Nats-Msg-Id "<entry id>-r<attempt>" and the expected
//     stream, so a publish repeated after a crash is dropped by the stream's
//     duplicate window and acknowledged with the original sequence;
//  6. mark replayed with that sequence (a write conditioned on the entry
//     being as the claim left it, so it reads nothing unless someone moved
//     it meanwhile: then it is read again and its status decides).
//
// Transient failures (Firestore, NATS) answer 5xx so Cloud Tasks retries.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/httpfunc"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// By is the actor name replay writes into entry and breaker history.
const By = "replay"

// Reasons written into the history when an entry leaves the replay path.
const (
	ReasonPayloadMissing = "payload_missing"
	ReasonPayloadCorrupt = "payload_corrupt"
	ReasonStreamMismatch = "stream_mismatch"
	ReasonTooLarge       = "payload_too_large"
)

// DefaultTimeout bounds one request when the caller set no deadline (Cloud
// Tasks' dispatch deadline is 10 minutes by default).
const DefaultTimeout = time.Minute

// maxBody bounds the task body read; a real one is well under 1 KiB.
const maxBody = 64 << 10

// Config is what replay reads from its environment.
type Config struct {
	// PublishTimeout bounds the wait for the JetStream ack (default
	// DefaultPublishTimeout): while NATS is unreachable the client buffers
	// the publish, and the request answers 503 after this long instead of
	// holding the task until its dispatch deadline.
	PublishTimeout time.Duration
}

// DefaultPublishTimeout is Config.PublishTimeout's default.
const DefaultPublishTimeout = 10 * time.Second

// Publisher publishes to JetStream (jetstream.JetStream).
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// PolicySource returns the triage policy in force (triage.Loader).
type PolicySource interface {
	Current(ctx context.Context) *triage.Policy
}

// Deps are the clients replay uses.
type Deps struct {
	Logger    *slog.Logger
	Store     Store
	Policy    PolicySource
	Publisher Publisher
	// Notify, when set, publishes the outbox right after a transition that
	// staged a notification; without it reconcile publishes it.
	Notify notify.Outbox
}

// Handler serves the replay function. Put it behind auth.Middleware.
type Handler struct {
	cfg    Config
	log    *slog.Logger
	store  Store
	policy PolicySource
	pub    Publisher
	note   notify.Outbox
}

// New returns a Handler.
func New(cfg Config, deps Deps) *Handler {
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = DefaultPublishTimeout
	}
	h := &Handler{cfg: cfg, log: deps.Logger, store: deps.Store, policy: deps.Policy, pub: deps.Publisher, note: deps.Notify}
	if h.log == nil {
		h.log = obs.Discard()
	}
	return h
}

// Result is the JSON body of a 200 answer: what happened to the entry.
type Result struct {
	EntryID string `json:"entry_id"`
	Attempt int    `json:"attempt"`
	// Outcome is one of the Outcome constants.
	Outcome   string `json:"outcome"`
	Status    string `json:"status,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Sequence  uint64 `json:"sequence,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Note      string `json:"note,omitempty"`
	// PayloadVersion is the version of the entry's payload the replay
	// publishes (1: the original; store.Entry.ReplayVersion).
	PayloadVersion int `json:"payload_version,omitempty"`
	// Decision is the current policy's answer when replay asked it (not
	// for an approved entry, nor one that stopped before the gates).
	Decision *Decision `json:"decision,omitempty"`
	// breakerMoved: the replay met its tenant breaker as a half-open probe
	// (admitted, or released when it went no further), so the breaker's
	// transition may have staged a notification.
	breakerMoved bool
}

// Decision is what the policy decided on re-evaluation.
type Decision struct {
	ReasonCode    string `json:"reason_code"`
	Category      string `json:"category"`
	Rule          string `json:"rule"`
	Action        string `json:"action"`
	Strategy      string `json:"strategy"`
	PolicyVersion string `json:"policy_version"`
}

// Outcomes.
const (
	OutcomeReplayed  = "replayed"
	OutcomeRecovered = "recovered"
	OutcomeSkipped   = "skipped" // not ours to replay: wrong status or task
	OutcomeGated     = "gated"   // policy or breaker kept it back
	OutcomeEscalated = "escalated"
)

// httpError is an answer other than 200.
type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func retry(format string, args ...any) error {
	return &httpError{code: http.StatusServiceUnavailable, err: fmt.Errorf(format, args...)}
}

// ServeHTTP handles one task delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !httpfunc.PostOnly(w, r, "replay") {
		return
	}
	ctx := r.Context()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	body, taskName, err := readTask(r)
	if err != nil {
		// A malformed task can never succeed; 400 is logged and shows in
		// the queue's metrics, and the queue's retry limit ends it.
		h.log.WarnContext(ctx, "replay: malformed task refused", "error", err.Error(), "task", r.Header.Get(tasks.HeaderTaskName))
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	res, err := h.Replay(ctx, body.EntryID, body.Attempt, taskName)
	if err != nil {
		code := http.StatusInternalServerError
		var he *httpError
		if errors.As(err, &he) {
			code = he.code
		}
		h.log.ErrorContext(ctx, "replay: failed; Cloud Tasks will retry", "event", logEventOutcome, "outcome", "failed",
			"entry_id", body.EntryID, "attempt", body.Attempt,
			"task", taskName, "status_code", code, "error", err.Error())
		http.Error(w, err.Error(), code)
		return
	}
	if store.Notifies(store.Status(res.Status)) || res.Outcome == OutcomeRecovered || res.breakerMoved {
		// The transition staged a notification (the entry needs a human;
		// a recovered probe closed its breaker; a probe opened it half-way
		// or, released, reopened it).
		h.flush(ctx, body.EntryID)
	}
	// One line per handled task: Terraform's replay-outcome metric counts it.
	h.log.InfoContext(ctx, "replay: "+res.Outcome, "event", logEventOutcome, "outcome", res.Outcome, "status", res.Status,
		"entry_id", body.EntryID, "attempt", body.Attempt, "task", taskName)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

// finishRecovery answers a redelivery of the task that replayed or
// recovered e, e recovered since: when this task recovered it, the steps
// after the move (its completion record kept, its breaker probe's report,
// its replay chain recovered) may have failed, and the answer said retry.
// MarkRecovered repeats them without counting e again; the outcome is
// skipped, so the task is not counted as a second recovery.
func (h *Handler) finishRecovery(ctx context.Context, e *store.Entry, taskName string, res Result) (Result, error) {
	if moved, err := h.markRecovered(ctx, e, store.Completion{Done: true}.Note(e), &res); err != nil || !moved {
		return res, err
	}
	h.log.InfoContext(ctx, "replay: redelivery of the recovering task; recovery finished", "entry_id", e.ID, "task", taskName)
	res.Outcome, res.Status, res.Note = OutcomeSkipped, string(store.Recovered), errRecovered.Error()
	// A recovered probe closed its breaker: flush its notification.
	res.breakerMoved = e.BreakerProbe
	return res, nil
}

// markRecovered moves e (replaying, or recovered already) to recovered, its
// task's completion record showing it completed (MarkRecovered, with the
// history note), and reports whether it is recovered; one moved on or gone
// meanwhile is res skipped, and err is for a retry.
func (h *Handler) markRecovered(ctx context.Context, e *store.Entry, note string, res *Result) (bool, error) {
	got, err := h.store.MarkRecovered(ctx, e.ID, store.MoveRecover.Only(store.Replaying), By, note)
	skip, err := h.recovered(ctx, e, got, err)
	switch {
	case err != nil:
		return false, retry("replay: mark %s recovered: %w", e.ID, err)
	case skip != nil:
		res.Outcome, res.Note = OutcomeSkipped, skip.Error()
		return false, nil
	}
	return true, nil
}

// recovered sorts MarkRecovered's answer for e (got, err) into what a retry
// can help with (retry) and what it cannot: an entry moved on or deleted
// meanwhile is a skip; an entry recovered whose later steps met a
// permanent problem (a chain longer than a recovery walks, a corrupt
// ancestor or completion record) is logged and left to its ancestors' last
// checks.
func (h *Handler) recovered(ctx context.Context, e, got *store.Entry, err error) (skip, retry error) {
	switch {
	case err == nil:
		return nil, nil
	case got == nil && (errors.Is(err, store.ErrWrongStatus) || errors.Is(err, store.ErrNotFound)):
		return err, nil
	case got != nil && got.Status == store.Recovered && (errors.Is(err, store.ErrChainTooLong) || errors.Is(err, store.ErrCorrupt) ||
		errors.Is(err, store.ErrBadID) || errors.Is(err, store.ErrInvalid)):
		h.log.WarnContext(ctx, "replay: entry recovered; the rest of its recovery is left to its replay chain's last checks", "entry_id", e.ID, "error", err.Error())
		return nil, nil
	}
	return nil, err
}

// logEventOutcome is the jsonPayload.event of the per-task outcome line.
const logEventOutcome = "replay_outcome"

func readTask(r *http.Request) (tasks.Body, string, error) {
	var b tasks.Body
	if err := httpfunc.ReadJSON(r, maxBody, &b); err != nil {
		return b, "", fmt.Errorf("replay: body is not a replay task {\"entry_id\",\"attempt\"}: %w", err)
	}
	if b.EntryID == "" || b.Attempt < 1 {
		return b, "", fmt.Errorf("replay: task body needs entry_id and attempt >= 1 (got %q, %d)", b.EntryID, b.Attempt)
	}
	want := tasks.Name(b.EntryID, b.Attempt)
	name := r.Header.Get(tasks.HeaderTaskName)
	if name == "" {
		// Called directly (dlqctl, tests): the body names the task.
		name = want
	}
	if name != want {
		return b, "", fmt.Errorf("replay: task %q does not carry entry %q attempt %d (want task %q)", name, b.EntryID, b.Attempt, want)
	}
	return b, name, nil
}

// errNotOurs ends a claim that belongs to another task; errReentered one
// that is ours already; errRecovered one that this task recovered.
var (
	errNotOurs   = errors.New("replay: entry is claimed by another task")
	errReentered = errors.New("replay: entry is claimed by this task already")
	errRecovered = errors.New("replay: entry is recovered by this task already")
)

// shortTask is a task name without its queue path.
func shortTask(name string) string { return name[strings.LastIndexByte(name, '/')+1:] }

// Replay replays attempt of entryID for the task taskName (its id, as Cloud
// Tasks sends it). It returns an error only when a retry can help.
func (h *Handler) Replay(ctx context.Context, entryID string, attempt int, taskName string) (Result, error) {
	res := Result{EntryID: entryID, Attempt: attempt}
	taskName = shortTask(taskName)

	// 1. Claim. A redelivery of the claiming task writes nothing (the
	// transaction is abandoned with errReentered): the entry is ours
	// already, and a long outage retried many times must not push the
	// approval out of the bounded history. A redelivery of the task that
	// recovered the entry finishes that recovery (finishRecovery).
	var reentered, recovered *store.Entry
	e, err := h.store.Transition(ctx, entryID, store.Change{
		// Every status that keeps the task is read; only scheduled is
		// moved (store.MoveClaim): Apply ends the claim of a redelivery
		// of this task, replaying or recovered.
		From: store.StatusesWhere(store.Status.KeepsTask),
		To:   store.Replaying,
		By:   By,
		Note: "task " + taskName,
		Apply: func(e *store.Entry) error {
			if e.TaskName != "" && shortTask(e.TaskName) != taskName {
				return fmt.Errorf("%w: entry %s belongs to task %s, not %s", errNotOurs, e.ID, e.TaskName, taskName)
			}
			switch {
			case e.Status == store.Recovered && e.TaskName == "":
				return fmt.Errorf("%w: entry %s is recovered", store.ErrWrongStatus, e.ID)
			case e.Status == store.Recovered:
				recovered = e
				return errRecovered
			case e.Status == store.Replaying:
				reentered = e
				return errReentered
			}
			e.TaskName = taskName
			return nil
		},
	})
	if errors.Is(err, errReentered) {
		e, err = reentered, nil
	}
	if errors.Is(err, errRecovered) {
		return h.finishRecovery(ctx, recovered, taskName, res)
	}
	switch {
	case errors.Is(err, store.ErrWrongStatus), errors.Is(err, errNotOurs), errors.Is(err, store.ErrNotFound):
		// Cloud Tasks may deliver twice, and a task may outlive its
		// entry's state (a replay done, an operator's decision, TTL).
		h.log.InfoContext(ctx, "replay: nothing to do for this task", "entry_id", entryID, "task", taskName, "reason", err.Error())
		res.Outcome, res.Note = OutcomeSkipped, err.Error()
		return res, nil
	case err != nil:
		return res, retry("replay: claim %s: %w", entryID, err)
	}
	log := h.log.With("entry_id", e.ID, "attempt", attempt, "task", taskName, "tenant", jevent.Wire(e.Tenant), "agent", jevent.Wire(e.Agent))
	if reentered != nil {
		log.InfoContext(ctx, "replay: redelivery of the claiming task; continuing")
	}

	// 2. Done already?
	done, err := h.store.Completion(ctx, e)
	if err != nil {
		return res, retry("replay: idempotency record of %s: %w", e.ID, err)
	}
	if done.Done {
		if moved, err := h.markRecovered(ctx, e, done.Note(e)+"; not published", &res); err != nil || !moved {
			return res, err
		}
		log.InfoContext(ctx, "replay: task completed meanwhile; recovered without a publish", "idempotency_key", e.IdempotencyKey,
			"legacy_completion", done.Legacy)
		res.Outcome, res.Status = OutcomeRecovered, string(store.Recovered)
		return res, nil
	}

	// 3. The payload: the version the entry replays (the original, or the
	// one an approval made), with the headers it sets.
	version, err := e.ReplayVersion()
	if err != nil {
		return h.leave(ctx, log, e, store.Escalated, OutcomeEscalated, ReasonPayloadCorrupt+": "+err.Error(), res)
	}
	if version.Missing {
		return h.leave(ctx, log, e, store.Escalated, OutcomeEscalated, ReasonPayloadMissing+": the payload of the dead message was not captured", res)
	}
	payload, err := h.store.VersionPayload(ctx, e, version.N)
	if err != nil {
		if errors.Is(err, store.ErrCorrupt) {
			return h.leave(ctx, log, e, store.Escalated, OutcomeEscalated, ReasonPayloadCorrupt+": "+err.Error(), res)
		}
		return res, retry("replay: payload of %s: %w", e.ID, err)
	}
	res.PayloadVersion = version.N
	headers, err := jevent.DecodeHeaders(e.HeadersOf(version))
	if err != nil {
		return h.leave(ctx, log, e, store.Escalated, OutcomeEscalated, "headers_corrupt: "+err.Error(), res)
	}

	// 4. Gates (docs/replay.md, "Steps"). The policy: an operator's approval
	// answers it for this replay, and only it. The breaker: asked whoever
	// wanted the replay; an open one holds it. The one way past an open
	// breaker is an explicit breaker action (store.BreakerProbeNow,
	// BreakerClose), which the breaker itself records and admit honours.
	plan, strategy := e.Plan, e.Strategy
	var decision *triage.Decision
	if e.Approved() {
		log.InfoContext(ctx, "replay: approved by an operator; the policy is not consulted, the breaker is")
	} else {
		in, err := e.PolicyInput()
		if err != nil {
			return h.leave(ctx, log, e, store.Escalated, OutcomeEscalated, "headers_corrupt: "+err.Error(), res)
		}
		d := h.policy.Current(ctx).Evaluate(in, e.PolicyChain())
		decision = &d
		res.Decision = &Decision{ReasonCode: d.ReasonCode, Category: string(d.Category), Rule: d.Rule,
			Action: string(d.Action), Strategy: d.Strategy, PolicyVersion: d.PolicyVersion}
		if d.Action != triage.AutoReplay {
			to := store.StatusFor(d.Action)
			note := fmt.Sprintf("policy %s rule %s now says %s", d.PolicyVersion, d.Rule, d.Action)
			if d.Note != "" {
				note += " (" + d.Note + ")"
			}
			return h.gate(ctx, log, e, to, note, &d, res)
		}
		plan, strategy = store.PlanOf(d), d.Strategy
	}
	ok, probe, err := h.store.BreakerAdmit(ctx, e.Tenant, e.ID, By)
	if err != nil {
		return res, retry("replay: breaker of tenant %s: %w", e.Tenant, err)
	}
	res.breakerMoved = probe
	if !ok {
		return h.gate(ctx, log, e, store.Held, "tenant breaker open", decision, res)
	}

	// 5. Publish.
	msg := Message(e, payload, headers, plan, strategy, attempt)
	msgID := MsgID(e.ID, attempt)
	pctx, cancel := context.WithTimeout(ctx, h.cfg.PublishTimeout)
	ack, err := h.pub.PublishMsg(pctx, msg, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(e.Stream))
	cancel()
	if err != nil {
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamNotMatch:
			return h.leave(ctx, log, e, store.Escalated, OutcomeEscalated,
				fmt.Sprintf("%s: subject %s is not in stream %s: %v", ReasonStreamMismatch, msg.Subject, e.Stream, err), res)
		case errors.Is(err, nats.ErrMaxPayload):
			return h.leave(ctx, log, e, store.Escalated, OutcomeEscalated, ReasonTooLarge+": "+err.Error(), res)
		}
		return res, retry("replay: publish %s to %s (stream %s): %w", e.ID, msg.Subject, e.Stream, err)
	}
	log.InfoContext(ctx, "replay: published", "subject", jevent.Wire(msg.Subject), "stream", ack.Stream, "sequence", ack.Sequence,
		"duplicate", ack.Duplicate, "msg_id", msgID, "strategy", strategy,
		"payload_version", version.N, "payload_size", len(payload), "payload_sha256", version.SHA256)

	// 6. Record.
	note := fmt.Sprintf("published to %s seq %d as %s; payload v%d (%d B sha256 %s)", ack.Stream, ack.Sequence, msgID, version.N, len(payload), version.SHA256)
	if ack.Duplicate {
		note += " (duplicate of an earlier publish of this attempt)"
	}
	// From the entry as the claim left it: a write conditioned on nobody
	// having changed it since (read again only if someone did).
	_, err = h.store.TransitionSeen(ctx, e, store.Change{
		From: store.MovePublish.From,
		To:   store.Replayed,
		By:   By,
		Note: note,
		// Counted with the transition: a crash between the two can
		// neither lose nor double the count.
		Count: &store.Metrics{ReplaysPublished: 1},
		Apply: func(cur *store.Entry) error {
			if shortTask(cur.TaskName) != taskName {
				return fmt.Errorf("%w: entry %s now belongs to task %s", errNotOurs, cur.ID, cur.TaskName)
			}
			cur.PublishedSeq = int64(min(ack.Sequence, 1<<63-1))
			cur.Replays++
			cur.BreakerProbe = probe
			cur.Plan, cur.Strategy = plan, strategy
			if decision != nil {
				cur.Classify(*decision)
			}
			return nil
		},
	})
	switch {
	case errors.Is(err, store.ErrWrongStatus), errors.Is(err, errNotOurs):
		// Someone (an operator, reconcile) moved the entry on between our
		// claim and now; the message is out, the decision theirs.
		log.WarnContext(ctx, "replay: published, but the entry was changed meanwhile; left as it is", "reason", err.Error())
		res.Outcome, res.Note = OutcomeSkipped, err.Error()
		return res, nil
	case err != nil:
		return res, retry("replay: mark %s replayed: %w", e.ID, err)
	}
	res.Outcome, res.Status = OutcomeReplayed, string(store.Replayed)
	res.Subject, res.Sequence, res.Duplicate = msg.Subject, ack.Sequence, ack.Duplicate
	return res, nil
}

// jsErrCodeStreamNotMatch is "expected stream does not match" (nats-server
// JSStreamNotMatchErr); nats.go has no constant for it.
const jsErrCodeStreamNotMatch jetstream.ErrorCode = 10060

// gate moves a claimed entry to where the policy or breaker sends it,
// recording the decision.
func (h *Handler) gate(ctx context.Context, log *slog.Logger, e *store.Entry, to store.Status, note string, d *triage.Decision, res Result) (Result, error) {
	res, err := h.move(ctx, log, e, to, OutcomeGated, note, func(cur *store.Entry) {
		if d == nil {
			return // approved: held by the breaker with the approved plan
		}
		cur.Classify(*d)
		if to == store.Held {
			return // the replay is still wanted, with this plan
		}
		cur.Strategy, cur.Plan = d.Strategy, store.PlanOf(*d)
	}, res)
	return res, err
}

// leave moves a claimed entry out of the replay path for a reason of its own.
func (h *Handler) leave(ctx context.Context, log *slog.Logger, e *store.Entry, to store.Status, outcome, note string, res Result) (Result, error) {
	return h.move(ctx, log, e, to, outcome, note, nil, res)
}

func (h *Handler) move(ctx context.Context, log *slog.Logger, e *store.Entry, to store.Status, outcome, note string, apply func(*store.Entry), res Result) (Result, error) {
	taskName := shortTask(e.TaskName)
	cur, err := h.store.TransitionSeen(ctx, e, store.Change{
		From: store.MoveGate.From,
		To:   to,
		By:   By,
		Note: note,
		Apply: func(cur *store.Entry) error {
			if shortTask(cur.TaskName) != taskName {
				return fmt.Errorf("%w: entry %s now belongs to task %s", errNotOurs, cur.ID, cur.TaskName)
			}
			if apply != nil {
				apply(cur)
			}
			return nil
		},
	})
	switch {
	case errors.Is(err, store.ErrWrongStatus), errors.Is(err, errNotOurs):
		res.Outcome, res.Note = OutcomeSkipped, err.Error()
		return res, nil
	case err != nil:
		return res, retry("replay: move %s to %s: %w", e.ID, to, err)
	}
	// The half-open probe will not be replayed now: the breaker reopens and
	// picks another after its cooldown rather than wait for it forever.
	// Held means the breaker has just refused this entry, so it is not the
	// probe; any other way out asks the breaker, since a probe admitted by
	// this or an earlier delivery is not marked on the entry until its
	// publish is recorded.
	if to != store.Held {
		released, err := h.store.ReleaseProbe(ctx, cur, By)
		if err != nil {
			log.WarnContext(ctx, "replay: breaker probe not released; reconcile moves the breaker on", "error", err.Error())
		}
		res.breakerMoved = res.breakerMoved || released
	}
	lvl := slog.LevelInfo
	if to == store.Escalated {
		lvl = slog.LevelWarn
	}
	log.Log(ctx, lvl, "replay: not published", "status", to, "reason", note)
	res.Outcome, res.Status, res.Note = outcome, string(to), note
	return res, nil
}

// flush publishes the outbox after a transition that staged a notification,
// so it reaches its subscribers and triage agent without waiting for the
// next reconcile run. Best effort: the transition is committed and the task
// must not be retried for this, so a failure is logged and reconcile
// publishes what is left.
func (h *Handler) flush(ctx context.Context, entryID string) {
	notify.AfterCommit(ctx, h.note, h.log, "replay", entryID, nil)
}
