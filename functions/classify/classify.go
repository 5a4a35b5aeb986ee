// Package classify is the classify function (docs/architecture.md, "One dead
// task, step by step"): it turns a jsdlq.event.v1 CloudEvent from Pub/Sub into
// a categorised failure-log entry, metrics and, where the policy says so, a
// scheduled replay.
//
// Pub/Sub delivers at least once and classify may crash anywhere, so every
// step is idempotent: the entry, its metrics and the tenant breaker change in
// one transaction that only a new entry commits; the replay task's name is
// derived from the entry id and attempt, so scheduling it again is a no-op.
package classify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// DefaultTimeout bounds one event when the caller set no deadline.
const DefaultTimeout = time.Minute

// DefaultRecordWait is how long a terminated advisory without its message
// waits for the explicit record of the same message (see Config.RecordWait).
const DefaultRecordWait = 30 * time.Second

// ErrAwaitingRecord is returned (so Pub/Sub redelivers later) for a
// terminated advisory whose message is gone while the explicit record of
// the same message may still be on its way.
var ErrAwaitingRecord = errors.New("classify: terminated advisory without its message; waiting for the explicit record")

// Config is what classify reads from its environment.
type Config struct {
	// RecordWait: a terminated advisory whose message is gone (a WorkQueue
	// TERM) carries no headers, so it knows neither the tenant nor the
	// replay chain. agentkit publishes the explicit record before the TERM,
	// but the bridge reads the two streams independently and either event
	// may arrive first. An advisory younger than RecordWait with no entry
	// yet is therefore refused with ErrAwaitingRecord, so the record creates
	// the entry and the redelivered advisory merges into it; an older one
	// (a TERM without agentkit, which has no record) is recorded as it is.
	// Zero means DefaultRecordWait; negative disables the wait.
	RecordWait time.Duration
}

// PolicySource returns the triage policy in force (triage.Loader).
type PolicySource interface {
	Current(ctx context.Context) *triage.Policy
}

// Scheduler creates replay tasks (tasks.Scheduler).
type Scheduler interface {
	Schedule(ctx context.Context, r tasks.Request) (name string, created bool, err error)
}

// Store is the part of the store classify uses (*store.Store): whether the
// entry exists, its link to the entry it replays, and the record itself.
type Store interface {
	GetMeta(ctx context.Context, id string) (*store.Entry, error)
	LinkReplay(ctx context.Context, e *store.Entry, headers map[string][]string) (chain triage.Chain, unlinked string, err error)
	Record(ctx context.Context, e *store.Entry, by string) (store.RecordResult, error)
}

// Deps are the clients classify uses.
type Deps struct {
	Logger    *slog.Logger
	Store     Store
	Policy    PolicySource
	Scheduler Scheduler
	// Notify, when set, publishes the outbox right after a commit that
	// staged a notification; without it reconcile publishes it.
	Notify notify.Outbox
	// Now is the clock for schedule times (default time.Now).
	Now func() time.Time
}

// Handler handles one CloudEvent.
type Handler struct {
	cfg   Config
	log   *slog.Logger
	store Store
	pol   PolicySource
	sched Scheduler
	note  notify.Outbox
	now   func() time.Time
}

// New returns a Handler.
func New(cfg Config, deps Deps) *Handler {
	if cfg.RecordWait == 0 {
		cfg.RecordWait = DefaultRecordWait
	}
	h := &Handler{cfg: cfg, log: deps.Logger, store: deps.Store, pol: deps.Policy, sched: deps.Scheduler, note: deps.Notify, now: deps.Now}
	if h.log == nil {
		h.log = obs.Discard()
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h
}

// malformed is input no retry can fix: it is logged and acknowledged.
type malformed struct{ err error }

func (m malformed) Error() string { return m.err.Error() }

func bad(format string, args ...any) error { return malformed{fmt.Errorf(format, args...)} }

// pushEnvelope is the CloudEvent data of a Pub/Sub message, as Eventarc
// sends it and as the functions framework converts a push request to.
type pushEnvelope struct {
	Message *struct {
		Data        []byte            `json:"data"`
		Attributes  map[string]string `json:"attributes"`
		MessageID   string            `json:"messageId"`
		PublishTime string            `json:"publishTime"`
	} `json:"message"`
	Subscription string `json:"subscription"`
}

// Handle classifies one event. It returns nil for malformed input (after one
// clear log line) and an error only when a retry can help (Firestore or
// Cloud Tasks unavailable), so Pub/Sub redelivers.
func (h *Handler) Handle(ctx context.Context, ce event.Event) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	err := h.handle(ctx, ce)
	var m malformed
	if errors.As(err, &m) {
		h.log.WarnContext(ctx, "classify: malformed event acknowledged without an entry",
			"reason", jevent.Wire(m.err.Error()), "cloudevent_id", ce.ID(), "cloudevent_type", ce.Type(), "source", ce.Source())
		return nil
	}
	return err
}

func (h *Handler) handle(ctx context.Context, ce event.Event) error {
	body, msgID, err := unwrap(ce)
	if err != nil {
		return err
	}
	ev, err := jevent.Decode(body)
	if err != nil {
		return bad("pubsub message %s: %w", msgID, err)
	}
	id, err := store.EntryID(ev.ID)
	if err != nil {
		return bad("event %s: %w", ev.ID, err)
	}
	headers, err := jevent.DecodeHeaders(ev.Message.Headers)
	if err != nil {
		return bad("event %s: headers: %w", ev.ID, err)
	}
	if h.mayAwaitRecord(ev) {
		_, err := h.store.GetMeta(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			h.log.InfoContext(ctx, "classify: terminated advisory without its message; retrying until the explicit record arrives",
				"event_id", jevent.Wire(ev.ID), "record_wait", h.cfg.RecordWait.String())
			return fmt.Errorf("%w: %s", ErrAwaitingRecord, ev.ID)
		case err != nil:
			return fmt.Errorf("classify: read %s: %w", id, err)
		}
	}
	e := store.NewEntry(id, ev, headers, jevent.DefaultConventions)
	chain, unlinked, err := h.store.LinkReplay(ctx, e, headers)
	if err != nil {
		return fmt.Errorf("classify: %w", err)
	}
	if unlinked != "" {
		h.log.WarnContext(ctx, "classify: "+unlinked, "entry_id", e.ID)
	}
	in, err := e.PolicyInput()
	if err != nil {
		return bad("event %s: %w", ev.ID, err)
	}
	d := h.pol.Current(ctx).Evaluate(in, chain)
	e.Decide(d, h.now())

	res, err := h.store.Record(ctx, e, "classify")
	switch {
	case errors.Is(err, store.ErrTooLarge), errors.Is(err, store.ErrBadID), errors.Is(err, store.ErrInvalid):
		return bad("event %s: %w", ev.ID, err)
	case err != nil:
		return fmt.Errorf("classify: record %s: %w", ev.ID, err)
	}
	cur := res.Entry
	if res.HandOff != nil {
		h.log.WarnContext(ctx, "classify: the replayed entry keeps its own completion checks", "entry_id", id, "error", res.HandOff.Error())
	}
	switch {
	case res.Refused != "":
		// Nothing of it is lost: the original stays in its stream, and
		// the event in the log line's ids.
		h.log.WarnContext(ctx, "classify: event of another tenant not merged into the entry", "event_id", jevent.Wire(ev.ID), "entry_id", id,
			"event_tenant", jevent.Wire(e.Tenant), "tenant", jevent.Wire(cur.Tenant), "reason", jevent.Wire(res.Refused))
	case res.Retenanted != "":
		h.log.InfoContext(ctx, "classify: the entry's tenant is now the one its explicit record names", "entry_id", id,
			"was", jevent.Wire(res.Retenanted), "tenant", jevent.Wire(cur.Tenant))
	}
	if len(e.InvalidNames) > 0 && (res.Created || res.Retenanted != "") {
		// Recorded all the same (capture never depends on a name), for an
		// operator: reconcile's invalid_names alert counts these entries.
		h.log.WarnContext(ctx, "classify: the dead task's names break the naming rule; recorded under the reserved tenant with the names it carried",
			"event_id", jevent.Wire(ev.ID), "entry_id", id, "tenant", cur.Tenant, "invalid_names", invalidFields(e.InvalidNames))
	}
	if res.Notified() {
		// The transaction staged a notification (the entry needs a human,
		// or the tenant breaker changed state). It leaves now, whatever
		// happens to the scheduling below.
		defer h.flush(ctx, cur.ID, res.Staged)
	}
	// "event" is what Terraform's log-based metrics count: entry_created
	// once per new entry, so a redelivery or a merge does not count twice.
	logEvent := "entry_redelivered"
	switch {
	case res.Created:
		logEvent = "entry_created"
	case res.Merged:
		logEvent = "entry_merged"
	}
	logArgs := []any{"event", logEvent, "event_id", jevent.Wire(ev.ID), "entry_id", id, "kind", ev.Kind, "tenant", jevent.Wire(cur.Tenant), "agent", jevent.Wire(cur.Agent),
		"category", cur.Category, "reason_code", cur.ReasonCode, "rule", cur.Rule, "action", cur.Action,
		"strategy", cur.Strategy, "status", cur.Status, "policy_version", cur.PolicyVersion,
		"created", res.Created, "merged", res.Merged}
	if res.Created {
		logArgs = append(logArgs, "breaker", res.Breaker)
	}

	// Scheduling happens after the commit. If it fails the error makes
	// Pub/Sub redeliver; the redelivery finds the entry still scheduled and
	// creates the task of the same name (ALREADY_EXISTS is success), so the
	// replay is scheduled exactly once whichever attempt gets through.
	if cur.Status == store.Scheduled && cur.TaskName != "" {
		name, created, err := h.sched.Schedule(ctx, tasks.Request{EntryID: cur.ID, Attempt: cur.Replays + 1, At: cur.NextRetryAt})
		if err != nil {
			if tasks.Retryable(err) {
				return fmt.Errorf("classify: schedule replay of %s: %w", cur.ID, err)
			}
			// The request itself is refused; retrying cannot help. The
			// entry stays scheduled and reconcile recreates missing tasks.
			h.log.ErrorContext(ctx, "classify: replay task refused; reconcile will retry it", append(logArgs, "error", err.Error())...)
			return nil
		}
		logArgs = append(logArgs, "task", name, "task_created", created, "next_retry_at", cur.NextRetryAt)
	}
	h.log.InfoContext(ctx, "classify: entry recorded", logArgs...)
	return nil
}

// mayAwaitRecord reports whether ev is a recent terminated advisory whose
// message is gone, so an explicit record may still bring its headers and
// payload. The server's own TERMs have no record and are not held back.
func (h *Handler) mayAwaitRecord(ev jevent.Event) bool {
	a := ev.Advisory
	if h.cfg.RecordWait < 0 || ev.Kind != jevent.KindTerminated || a == nil || !ev.Message.Missing ||
		ev.Message.MissingReason != jevent.MissingNotFound {
		return false
	}
	for _, text := range jevent.ServerTermReasons {
		if strings.HasPrefix(strings.ToLower(a.Reason), strings.ToLower(text)) {
			return false
		}
	}
	at := a.Timestamp
	if at.IsZero() {
		at = ev.ObservedAt
	}
	return h.now().Sub(at) < h.cfg.RecordWait
}

// unwrap returns the Pub/Sub message body of a CloudEvent.
func unwrap(ce event.Event) (body []byte, msgID string, err error) {
	data := ce.Data()
	if len(data) == 0 {
		return nil, "", bad("cloudevent %s has no data", ce.ID())
	}
	var env pushEnvelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, "", bad("cloudevent %s: data is not a Pub/Sub message envelope: %v", ce.ID(), err)
	}
	if env.Message == nil {
		return nil, "", bad("cloudevent %s: data has no Pub/Sub message", ce.ID())
	}
	if len(env.Message.Data) == 0 {
		return nil, env.Message.MessageID, bad("pubsub message %s has no data", env.Message.MessageID)
	}
	return env.Message.Data, env.Message.MessageID, nil
}

// flush publishes what a commit staged (by id: no read of the outbox), so
// it reaches its subscribers and triage agent without waiting for the next
// reconcile run, and once a minute what other flushes left. Best effort:
// the commit is done and must not be retried for this, so a failure is
// logged and a later flush or reconcile publishes what is left.
func (h *Handler) flush(ctx context.Context, entryID string, staged []*store.Outbox) {
	notify.AfterCommit(ctx, h.note, h.log, "classify", entryID, staged)
}

// invalidFields names the fields of an entry's names that broke the naming
// rule, for a log line (the values are on the entry, escaped where shown).
func invalidFields(names []jevent.InvalidName) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.Field
	}
	return out
}
