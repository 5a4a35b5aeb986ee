// Package deliver is the deliver function: Cloud Tasks calls it with
// {"webhook_id","notification_id"} (a task the notifications flusher made
// for each tenant notification and each enabled endpoint of its tenant), and
// it POSTs the notification to the endpoint, signed by the Standard Webhooks
// scheme with the endpoint's secret (opened from its sealed form,
// shared/hooksecret) and a fresh timestamp.
//
// Its answer steers Cloud Tasks: 200 when the delivery succeeded or can
// never happen (the endpoint was removed or disabled, the notification is
// gone, the task is malformed), 503 when it failed and the endpoint is
// still enabled, so the queue retries with its backoff. Every failure
// extends the endpoint's run of failures; the one that reaches the
// configured length disables the endpoint and tells the operators (a
// webhook_disabled notification, staged in the same transaction), and its
// task, like every later one, is answered 200 and dropped.
//
// Retries are safe: the request repeats the same webhook-id (the
// notification id), by which a receiver drops a repeat, and recording an
// attempt only counts it.
package deliver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/httpfunc"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// UserAgent is sent with every delivery.
const UserAgent = "jsdlq-webhooks/1"

// maxBody bounds the task body read; a real one is about 100 bytes.
const maxBody = 4 << 10

// Outcomes.
const (
	OutcomeDelivered = "delivered"
	OutcomeFailed    = "failed"   // answered 503: Cloud Tasks retries
	OutcomeDisabled  = "disabled" // this failure disabled the endpoint
	OutcomeDropped   = "dropped"  // nothing to deliver, ever
)

// Config is how deliveries are made.
type Config struct {
	// DisableAfter is the run of failures that disables an endpoint
	// (default config.DefaultWebhookDisableAfter).
	DisableAfter int
	// Timeout bounds one delivery (default config.DefaultWebhookTimeout).
	Timeout time.Duration
}

// Store is the part of the store a delivery uses (*store.Store): the
// endpoint and the notification it reads, the attempt it records, and the
// seal of a secret still stored in the clear.
type Store interface {
	WebhookByID(ctx context.Context, id string) (*store.Webhook, error)
	GetNotification(ctx context.Context, id string) (*store.Outbox, error)
	RecordWebhookAttempt(ctx context.Context, id string, a store.WebhookAttempt, disableAfter int) (*store.Webhook, error)
	hooksecret.SecretSealer
}

// Deps are what the handler uses.
type Deps struct {
	Logger *slog.Logger
	Store  Store
	// Guard refuses endpoints jsdlq must not call and makes the client
	// (nil: a strict guard).
	Guard *webhook.Guard
	// Secrets opens the endpoints' sealed signing secrets and seals the
	// clear ones of endpoints added before secrets were sealed
	// (*secretbox.Box; required: without it no delivery is signed).
	Secrets hooksecret.Box
	// Now is the signing clock (default time.Now).
	Now func() time.Time
}

// Handler serves the deliver function. Put it behind auth.Middleware.
type Handler struct {
	cfg     Config
	log     *slog.Logger
	store   Store
	guard   *webhook.Guard
	secrets hooksecret.Box
	client  *http.Client
	now     func() time.Time
}

// New returns a Handler.
func New(cfg Config, deps Deps) *Handler {
	if cfg.DisableAfter <= 0 {
		cfg.DisableAfter = config.DefaultWebhookDisableAfter
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = config.DefaultWebhookTimeout
	}
	h := &Handler{cfg: cfg, log: deps.Logger, store: deps.Store, guard: deps.Guard, secrets: deps.Secrets, now: deps.Now}
	if h.log == nil {
		h.log = obs.Discard()
	}
	if h.guard == nil {
		h.guard = webhook.NewGuard()
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.client = h.guard.Client(cfg.Timeout)
	return h
}

// Result is the JSON body of an answer.
type Result struct {
	WebhookID      string `json:"webhook_id,omitempty"`
	NotificationID string `json:"notification_id,omitempty"`
	Outcome        string `json:"outcome"`
	// Status is the endpoint's HTTP status (0: none came).
	Status int `json:"status,omitempty"`
	// Failures is the endpoint's run of failures after this attempt.
	Failures int    `json:"consecutive_failures,omitempty"`
	Note     string `json:"note,omitempty"`
}

// ServeHTTP handles one task.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !httpfunc.PostOnly(w, r, "deliver") {
		return
	}
	ctx := r.Context()
	var res Result
	task, err := readTask(r)
	if err != nil {
		// Only the flusher creates tasks: a malformed one is a bug, and no
		// retry mends it.
		h.log.ErrorContext(ctx, "deliver: malformed task dropped", "error", err.Error(), "task", r.Header.Get(tasks.HeaderTaskName))
		res, err = Result{Outcome: OutcomeDropped, Note: err.Error()}, nil
	} else {
		res, err = h.Deliver(ctx, task)
	}
	code := http.StatusOK
	if err != nil {
		code = http.StatusServiceUnavailable
		res.Note = err.Error()
	}
	h.log.InfoContext(ctx, "deliver: "+res.Outcome, "event", "webhook_outcome", "outcome", res.Outcome,
		"webhook_id", res.WebhookID, "notification_id", res.NotificationID, "endpoint_status", res.Status,
		"consecutive_failures", res.Failures, "status_code", code, "task", r.Header.Get(tasks.HeaderTaskName), "note", res.Note)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(res)
}

func readTask(r *http.Request) (notify.WebhookTask, error) {
	var t notify.WebhookTask
	if err := httpfunc.ReadJSON(r, maxBody, &t); err != nil {
		return t, fmt.Errorf(`deliver: body is not a delivery task {"webhook_id","notification_id"}: %w`, err)
	}
	if !validNotificationID(t.NotificationID) || t.WebhookID == "" {
		return t, fmt.Errorf("deliver: task names webhook %q and notification %q", t.WebhookID, t.NotificationID)
	}
	if name := r.Header.Get(tasks.HeaderTaskName); name != "" && name != t.Name() {
		return t, fmt.Errorf("deliver: task %q does not carry webhook %q and notification %q", name, t.WebhookID, t.NotificationID)
	}
	return t, nil
}

// validNotificationID: "n-" and 32 lower hex digits (event.NotificationID),
// so no other string reaches Firestore as a document path.
func validNotificationID(id string) bool {
	if len(id) != 34 || id[:2] != "n-" {
		return false
	}
	for _, c := range id[2:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Deliver makes one delivery attempt of t. It returns an error only when a
// retry can help: the delivery failed and the endpoint is still enabled,
// or the store could not be read or written.
func (h *Handler) Deliver(ctx context.Context, t notify.WebhookTask) (Result, error) {
	res := Result{WebhookID: t.WebhookID, NotificationID: t.NotificationID}
	drop := func(note string) (Result, error) {
		res.Outcome, res.Note = OutcomeDropped, note
		return res, nil
	}
	ep, err := h.store.WebhookByID(ctx, t.WebhookID)
	if errors.Is(err, store.ErrNotFound) {
		return drop("the endpoint was removed")
	}
	if err != nil {
		return res, err
	}
	if !ep.Enabled {
		return drop("the endpoint is disabled")
	}
	o, err := h.store.GetNotification(ctx, t.NotificationID)
	if errors.Is(err, store.ErrNotFound) {
		return drop("the notification is gone")
	}
	if err != nil {
		return res, err
	}
	n, err := o.Event()
	if err != nil {
		return drop("the notification does not decode: " + err.Error())
	}
	if n.Tenant != ep.Tenant || !n.ForTenant() {
		// Never another tenant's notification, whoever made the task.
		h.log.ErrorContext(ctx, "deliver: task pairs an endpoint with a notification not for its tenant; dropped",
			"webhook_id", ep.ID, "endpoint_tenant", ep.Tenant, "notification_tenant", n.Tenant, "kind", n.Kind)
		return drop("the notification is not for the endpoint's tenant")
	}

	if h.secrets == nil {
		return res, errors.New("deliver: no secret box: the signing secrets cannot be opened (SECRETS_KMS_KEY)")
	}
	// The endpoint is checked again now: the own addresses may have grown
	// (a deployment's URLs) since it was added. A refusal, or a secret that
	// does not open for this endpoint (its record was altered), is a failed
	// delivery that no retry mends; a check or a key that cannot be used
	// now is retried without counting against the endpoint.
	var attempt store.WebhookAttempt
	u, err := h.guard.Check(ctx, ep.URL)
	switch {
	case errors.Is(err, webhook.ErrRefusedURL):
		attempt = store.WebhookAttempt{Error: err.Error()}
	case err != nil:
		return res, fmt.Errorf("deliver: check webhook %s: %w", ep.ID, err)
	}
	var sec webhook.Secret
	legacy := false
	if u != nil {
		sec, legacy, err = hooksecret.Open(ctx, h.secrets, ep)
		switch {
		case errors.Is(err, secretbox.ErrOpen), errors.Is(err, hooksecret.ErrNoSecret):
			h.log.ErrorContext(ctx, "deliver: the endpoint's signing secret does not open; its record was altered or copied", "webhook_id", ep.ID, "error", err.Error())
			attempt = store.WebhookAttempt{Error: "the endpoint's signing secret does not open (its record was altered); add the endpoint again"}
		case err != nil:
			return res, fmt.Errorf("deliver: webhook %s: %w", ep.ID, err)
		default:
			attempt = h.post(ctx, u, sec, n.ID, []byte(o.ForTenant()))
		}
	}
	res.Status = attempt.Status
	// The attempt is recorded even when the request is cancelled.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	after, err := h.store.RecordWebhookAttempt(rctx, ep.ID, attempt, h.cfg.DisableAfter)
	if errors.Is(err, store.ErrNotFound) {
		return drop("the endpoint was removed during the delivery")
	}
	if err != nil {
		return res, fmt.Errorf("deliver: record attempt on webhook %s: %w", ep.ID, err)
	}
	res.Failures = after.Failures
	if legacy {
		// An endpoint added before secrets were sealed: its secret is sealed
		// now, in place of the clear one (a repeat finds it sealed).
		if _, err := hooksecret.Seal(rctx, h.store, h.secrets, ep, sec); err != nil {
			h.log.WarnContext(ctx, "deliver: the clear signing secret could not be sealed; the next delivery tries again", "webhook_id", ep.ID, "error", err.Error())
		}
	}
	switch {
	case attempt.OK:
		res.Outcome = OutcomeDelivered
		return res, nil
	case !after.Enabled:
		res.Outcome, res.Note = OutcomeDisabled, attempt.Error
		return res, nil
	}
	res.Outcome = OutcomeFailed
	return res, fmt.Errorf("deliver: webhook %s: %s", ep.ID, attempt.Error)
}

// post sends the notification, signed with sec, to the endpoint at u (its
// URL, checked) and says how it went. The error text is ours (never the
// endpoint's body): it reaches the operators' notification.
func (h *Handler) post(ctx context.Context, u *url.URL, sec webhook.Secret, id string, body []byte) store.WebhookAttempt {
	fail := func(status int, format string, args ...any) store.WebhookAttempt {
		return store.WebhookAttempt{Status: status, Error: fmt.Sprintf(format, args...)}
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return fail(0, "request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	if err := webhook.SetHeaders(req.Header, sec, id, h.now(), body); err != nil {
		return fail(0, "sign: %v", err)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if errors.Is(err, webhook.ErrRefusedURL) {
			return fail(0, "connection refused by jsdlq: %s resolves to an address that is not allowed", u.Hostname())
		}
		if ctx.Err() != nil {
			return fail(0, "no answer within %s", h.cfg.Timeout)
		}
		return fail(0, "request to %s failed: %v", u.Hostname(), unwrapURLError(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return store.WebhookAttempt{OK: true, Status: resp.StatusCode}
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fail(resp.StatusCode, "HTTP %d: redirects are not followed", resp.StatusCode)
	}
	return fail(resp.StatusCode, "HTTP %d", resp.StatusCode)
}

// unwrapURLError drops the *url.Error layer, which repeats the URL (it may
// carry the tenant's token).
func unwrapURLError(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
