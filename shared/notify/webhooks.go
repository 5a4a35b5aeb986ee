package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/api/option"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// This file is the webhook fan-out: for each notification its tenant's
// webhooks receive (store's webhooks_pending) and each enabled endpoint of
// that tenant, one Cloud Tasks task that makes the deliver function POST
// the notification to the endpoint. The task's name is derived from the
// endpoint and the notification, so a flush repeated before the fan-out is
// recorded creates nothing new (ALREADY_EXISTS is success); once recorded,
// the notification is not fanned out again. Cloud Tasks retries a failed
// delivery with the queue's backoff.

// WebhookTask is the JSON body of a delivery task.
type WebhookTask struct {
	WebhookID      string `json:"webhook_id"`
	NotificationID string `json:"notification_id"`
}

// Name is the task id of the delivery: "wh-<endpoint id>-<notification
// id>" (both ids are lower hex and "n-<hex>", characters Cloud Tasks takes).
func (t WebhookTask) Name() string { return "wh-" + t.WebhookID + "-" + t.NotificationID }

// WebhookTasks creates delivery tasks (*WebhookQueue).
type WebhookTasks interface {
	// CreateDelivery creates t's task; created is false when it exists.
	CreateDelivery(ctx context.Context, t WebhookTask) (created bool, err error)
}

// WithWebhooks makes Flush fan tenant notifications out to their tenant's
// webhooks through tasks (nil: it leaves them for a flusher that has it).
func WithWebhooks(tasks WebhookTasks) Option { return func(f *Flusher) { f.hooks = tasks } }

// WebhooksFrom is WithWebhooks over the queue cfg names, or no option when
// cfg names none: every component that flushes passes its configuration.
func WebhooksFrom(cfg config.Webhooks) Option {
	if cfg.Queue == "" {
		return func(*Flusher) {}
	}
	return WithWebhooks(NewWebhookQueue(cfg))
}

// WebhookQueue creates delivery tasks in the webhook queue. Its client is
// made on first use.
type WebhookQueue struct {
	cfg    config.Webhooks
	client *tasks.Client
}

// NewWebhookQueue returns the queue of cfg (cfg.Queue, DeliverURL and
// ServiceAccount must be set: config.ReadWebhooks checks them); opts are
// added to the Cloud Tasks client's (the emulator's when cfg names one).
func NewWebhookQueue(cfg config.Webhooks, opts ...option.ClientOption) *WebhookQueue {
	return &WebhookQueue{cfg: cfg, client: tasks.NewClient(cfg.EmulatorHost, opts...)}
}

// CreateDelivery creates the task that delivers t, due now.
func (q *WebhookQueue) CreateDelivery(ctx context.Context, t WebhookTask) (bool, error) {
	c, err := q.client.Get()
	if err != nil {
		return false, err
	}
	body, _ := json.Marshal(t)
	name := q.cfg.Queue + "/tasks/" + t.Name()
	created, err := tasks.CreateJSONTask(ctx, c, q.cfg.Queue, name, q.cfg.DeliverURL, q.cfg.ServiceAccount, body, time.Time{})
	if err != nil {
		return false, fmt.Errorf("notify: webhook delivery: %w", err)
	}
	return created, nil
}

// Close closes the client if it was made.
func (q *WebhookQueue) Close() error { return q.client.Close() }

// fanOut creates the deliveries of the notifications pending fan-out and
// records each notification whose every delivery exists. A notification
// some delivery of which failed stays pending for the next flush; the
// deliveries it made already are not made twice (their names).
func (f *Flusher) fanOut(ctx context.Context, res *Result) {
	pending, err := f.store.PendingWebhookFanOut(ctx, f.batch)
	if err != nil {
		res.WebhookErrors = append(res.WebhookErrors, err.Error())
		f.log.WarnContext(ctx, "notify: webhook fan-out not read; the next flush retries it", "error", err.Error())
		return
	}
	f.fanOutList(ctx, pending, res)
}

// fanOutList creates the deliveries of pending, notifications whose
// fan-out is not recorded yet, each tenant's endpoints listed once.
func (f *Flusher) fanOutList(ctx context.Context, pending []*store.Outbox, res *Result) {
	endpoints := map[string][]*store.Webhook{}
	for _, o := range pending {
		if !o.WebhooksPending {
			// Recorded meanwhile by another flush (a claim's settle
			// brings the document as stored).
			continue
		}
		if err := f.fanOutOne(ctx, o, endpoints, res); err != nil {
			res.WebhookErrors = append(res.WebhookErrors, fmt.Sprintf("%s: %v", o.ID, err))
			f.log.WarnContext(ctx, "notify: webhook deliveries not all created; the next flush retries them", "notification_id", o.ID, "tenant", o.Tenant, "error", err.Error())
		}
	}
}

func (f *Flusher) fanOutOne(ctx context.Context, o *store.Outbox, endpoints map[string][]*store.Webhook, res *Result) error {
	n, err := o.Event()
	if err != nil {
		// A notification that does not decode is never sent anywhere;
		// its publication reports it. Nothing to fan out.
		return f.store.WebhookFanOutDone(ctx, o.ID)
	}
	if n.ForTenant() {
		eps, ok := endpoints[n.Tenant]
		if !ok {
			eps, err = f.store.ListWebhooks(ctx, n.Tenant)
			switch {
			case errors.Is(err, store.ErrInvalid):
				// A tenant name no endpoint can be registered for
				// (over-long, control characters: ingestion keeps the
				// entry whatever its tenant) has none. Left pending,
				// it would fail every flush until it expired, and
				// enough of them would fill the batches that list
				// pending fan-outs for every tenant.
				eps = nil
			case err != nil:
				return err
			}
			endpoints[n.Tenant] = eps
		}
		for _, w := range eps {
			if !w.Enabled {
				continue
			}
			var created bool
			err := f.call(ctx, DestinationWebhooks, func(ctx context.Context) (err error) {
				created, err = f.hooks.CreateDelivery(ctx, WebhookTask{WebhookID: w.ID, NotificationID: n.ID})
				return err
			})
			if err != nil {
				return err
			}
			if created {
				res.Webhooks++
			}
		}
	}
	return f.store.WebhookFanOutDone(ctx, o.ID)
}
