// Package notify publishes the notifications outbox (store.Notifications):
// each jsdlq.notification.v1 event to the Pub/Sub topic dlq-notifications,
// with the attributes kind, tenant, severity and notification_id for
// subscription filters, and, for an entry escalated or awaiting approval,
// one triage task (jsdlq.triage.v1) on the triage agent's subject of the
// work stream; with WithWebhooks, each notification a tenant's webhooks
// receive becomes one delivery task per enabled endpoint of the tenant
// (webhooks.go), which the deliver function sends signed.
//
// The store writes a notification in the transaction of the transition it
// reports, so it exists exactly when the transition does; Flush only moves
// it on. A claim (a lease taken by a write conditioned on the document as
// read or committed) keeps two flushes from publishing the same
// notification; the triage task carries
// Nats-Msg-Id "triage-<notification id>" and its publish is recorded before
// the Pub/Sub publish, so a retried flush never sends it twice. A Pub/Sub
// subscriber sees a notification at least once, and once more only when a
// flusher crashed between the publish and its record: it deduplicates by
// the notification_id attribute.
package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/api/option"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
)

// TriageMsgIDPrefix begins the Nats-Msg-Id of a triage task.
const TriageMsgIDPrefix = "triage-"

// ErrNoTasks is a triage task's failure when the flusher has no JetStream.
var ErrNoTasks = errors.New("notify: no JetStream to publish the triage task to")

// ErrLeaseRunningOut is the failure of a notification a flush claimed but
// did not publish before its claim's lease was nearly over.
var ErrLeaseRunningOut = errors.New("notify: the claim's lease is running out")

// Topic publishes one message to the notifications topic and waits for the
// server's acknowledgement.
type Topic interface {
	Publish(ctx context.Context, data []byte, attrs map[string]string) error
}

// Tasks publishes to the work stream (jetstream.JetStream).
type Tasks interface {
	PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Store is the outbox side of the store a Flusher works (*store.Store):
// claiming staged and pending rows and change rows under a lease, settling
// them, the webhook fan-out's queue and the endpoints it fans out to, and
// the store's clock (leases are the store's time).
type Store interface {
	Now() time.Time
	ClaimStaged(ctx context.Context, o *store.Outbox, owner string, lease time.Duration) (*store.Outbox, error)
	ClaimNotifications(ctx context.Context, owner string, lease time.Duration, limit int) ([]*store.Outbox, error)
	ClaimChanges(ctx context.Context, owner string, lease time.Duration, limit int) ([]*store.Outbox, error)
	ReleaseNotification(ctx context.Context, o *store.Outbox, owner string, cause error) error
	NotificationTriagePublished(ctx context.Context, o *store.Outbox, owner string) error
	NotificationPublished(ctx context.Context, o *store.Outbox, owner string) error
	PendingWebhookFanOut(ctx context.Context, limit int) ([]*store.Outbox, error)
	WebhookFanOutDone(ctx context.Context, id string) error
	ListWebhooks(ctx context.Context, tenant string) ([]*store.Webhook, error)
}

// Flusher publishes pending notifications. It is safe for concurrent use,
// and any number of flushers may run at once.
type Flusher struct {
	store   Store
	topic   Topic
	changes Topic
	tasks   func(context.Context) (Tasks, error)
	hooks   WebhookTasks
	console string
	owner   string
	lease   time.Duration
	batch   int
	log     *slog.Logger
	// sweepEvery is how often FlushStaged also runs Flush's query;
	// lastSweep is when it last did (unix nanoseconds, the store's clock).
	sweepEvery time.Duration
	lastSweep  atomic.Int64
	// pauses skip a destination for a while after it failed (WithPause);
	// budget bounds AfterCommit (WithAfterCommitBudget).
	pauses *pauses
	budget time.Duration
}

// Option configures New.
type Option func(*Flusher)

// WithConsoleURL sets the console's address; triage tasks link to the
// entry's page under it.
func WithConsoleURL(u string) Option { return func(f *Flusher) { f.console = u } }

// WithLease sets how long a claim lasts (default 2 min): a flusher that
// crashed holds its notifications that long.
func WithLease(d time.Duration) Option { return func(f *Flusher) { f.lease = d } }

// WithSweepEvery sets how often FlushStaged also publishes what is pending
// besides the notifications it was given (default DefaultSweepEvery).
func WithSweepEvery(d time.Duration) Option { return func(f *Flusher) { f.sweepEvery = d } }

// DefaultSweepEvery is how often a flusher that publishes after commits
// (FlushStaged) also looks for what other flushes left pending: such a
// notification waits for the first of this instance's flushes this long
// after its last sweep, or for reconcile's next run.
const DefaultSweepEvery = time.Minute

// WithChanges sets the change feed's topic (dlq-changes): Flush publishes
// the feed's rows (store.Changes) there too. Without it the rows stay in
// their outbox for a flusher that has one.
func WithChanges(t Topic) Option { return func(f *Flusher) { f.changes = t } }

// maxChangePages bounds the pages of the change feed one Flush publishes:
// a backlog (a topic that refused rows for a while) drains over a few
// flushes rather than holding one.
const maxChangePages = 20

// WithBatch bounds the notifications one Flush claims (default 500).
func WithBatch(n int) Option { return func(f *Flusher) { f.batch = n } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(f *Flusher) { f.log = l } }

// WithTasks sets the work stream's publisher, connected on first use; nil
// (the default) leaves triage notifications pending, failed.
func WithTasks(tasks func(context.Context) (Tasks, error)) Option {
	return func(f *Flusher) { f.tasks = tasks }
}

// LazyJetStream adapts a lazily connected JetStream (natsconn.Lazy) to
// WithTasks.
func LazyJetStream(js func(context.Context) (jetstream.JetStream, error)) func(context.Context) (Tasks, error) {
	return func(ctx context.Context) (Tasks, error) { return js(ctx) }
}

// New returns a Flusher of st's outbox publishing to topic.
func New(st Store, topic Topic, opts ...Option) *Flusher {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	f := &Flusher{store: st, topic: topic, owner: "flusher-" + hex.EncodeToString(b),
		lease: 2 * time.Minute, batch: 500, log: obs.Discard(), sweepEvery: DefaultSweepEvery, budget: DefaultAfterCommitBudget}
	f.lastSweep.Store(neverSwept)
	for _, o := range opts {
		o(f)
	}
	return f
}

// Result is what one Flush did.
type Result struct {
	Published int // notifications published and marked so
	Triaged   int // triage tasks published
	Failed    int // notifications left pending for the next flush
	// Paused counts notifications not tried because a destination they
	// need is paused (WithPause); they stay pending too.
	Paused int
	// Errors are the failures' causes, one per failed notification.
	Errors []string
	// Webhooks counts the webhook deliveries created (WithWebhooks);
	// WebhookErrors are the notifications whose fan-out failed and why
	// (the next flush retries them).
	Webhooks      int
	WebhookErrors []string
	// Changes counts the change feed's rows published (WithChanges).
	Changes int
}

// Flush publishes the pending notifications it can claim. A notification
// that fails is released for the next flush and counted in Failed; the
// error is for a failure to claim at all.
func (f *Flusher) Flush(ctx context.Context) (Result, error) {
	var res Result
	var err error
	// Every notification goes to the topic: while it is paused nothing
	// is claimed (and nothing counted failed: nothing was tried). The
	// change feed has a topic of its own.
	if f.skip(DestinationTopic) == nil {
		err = f.publishPending(ctx, &res)
	}
	err = errors.Join(err, f.publishChanges(ctx, &res))
	if f.hooks != nil && f.skip(DestinationWebhooks) == nil {
		// The fan-out does not wait for the topic: a notification reaches
		// its tenant's webhooks even while Pub/Sub refuses it.
		f.fanOut(ctx, &res)
	}
	return res, err
}

// FlushStaged publishes the notifications a commit just staged
// (store.RecordResult.Staged), each claimed by id without a read of the
// outbox (store.ClaimStaged), and fans them out to their tenant's webhooks.
// Every DefaultSweepEvery (WithSweepEvery) of this flusher's calls it also
// does what Flush does: what another flush left pending (a publish that
// failed, an instance that stopped between its commit and its flush) is
// published then, without every commit querying the outbox.
func (f *Flusher) FlushStaged(ctx context.Context, staged []*store.Outbox) (Result, error) {
	var res Result
	var errs []error
	var fanOut []*store.Outbox
	for _, o := range staged {
		if err := f.paused(o); err != nil {
			// Not even claimed: it stays pending, for a later flush or
			// reconcile, at no cost to the commit's caller.
			res.Paused++
			continue
		}
		claim, err := f.store.ClaimStaged(ctx, o, f.owner, f.lease)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("notify: claim %s: %w", o.ID, err))
		case claim != nil:
			// As claimed (re-read if it changed): a fan-out another flush
			// recorded meanwhile is not made again.
			if claim.WebhooksPending {
				fanOut = append(fanOut, claim)
			}
			f.publishClaimed(ctx, claim, &res)
		}
	}
	if f.hooks != nil && f.skip(DestinationWebhooks) == nil {
		f.fanOutList(ctx, fanOut, &res)
	}
	if f.skip(DestinationTopic) == nil && f.sweepDue() {
		swept, err := f.Flush(ctx)
		res.add(swept)
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// neverSwept is lastSweep before the first sweep.
const neverSwept = math.MinInt64

// sweepDue reports whether this call is the one that sweeps: the first, or
// the first since the last sweep is sweepEvery old (or, the clock having
// gone back, in the future).
func (f *Flusher) sweepDue() bool {
	now := f.store.Now().UnixNano()
	last := f.lastSweep.Load()
	if last != neverSwept && now >= last && now-last < int64(f.sweepEvery) {
		return false
	}
	return f.lastSweep.CompareAndSwap(last, now)
}

// add adds what another flush did to r.
func (r *Result) add(o Result) {
	r.Published += o.Published
	r.Triaged += o.Triaged
	r.Failed += o.Failed
	r.Paused += o.Paused
	r.Errors = append(r.Errors, o.Errors...)
	r.Webhooks += o.Webhooks
	r.WebhookErrors = append(r.WebhookErrors, o.WebhookErrors...)
	r.Changes += o.Changes
}

// publishPending publishes what it can claim into res.
func (f *Flusher) publishPending(ctx context.Context, res *Result) error {
	claimed, err := f.store.ClaimNotifications(ctx, f.owner, f.lease, f.batch)
	_, err = f.publishAll(ctx, claimed, err, res)
	return err
}

// publishChanges publishes the change feed's pending rows, page after page
// while pages come back full (at most maxChangePages), into res.
func (f *Flusher) publishChanges(ctx context.Context, res *Result) error {
	if f.changes == nil {
		return nil
	}
	for range maxChangePages {
		claimed, err := f.store.ClaimChanges(ctx, f.owner, f.lease, f.batch)
		full, err := f.publishAll(ctx, claimed, err, res)
		if err != nil || !full || len(claimed) < f.batch || ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// publishAll publishes what a claim returned (claimErr: its failure) into
// res; full reports that every claimed document was published.
func (f *Flusher) publishAll(ctx context.Context, claimed []*store.Outbox, claimErr error, res *Result) (full bool, err error) {
	if claimErr != nil && len(claimed) == 0 {
		return false, fmt.Errorf("notify: claim: %w", claimErr)
	}
	failedBefore := res.Failed
	for i, o := range claimed {
		// A publish after the claim's lease ran out could meet another
		// flush's claim of the same notification: what is left waits for
		// the lease to end and the next flush.
		if left := o.LeaseUntil.Sub(f.store.Now()); left < f.lease/4 {
			for _, o := range claimed[i:] {
				res.Failed++
				res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", o.ID, ErrLeaseRunningOut))
			}
			f.log.WarnContext(ctx, "notify: claims running out; the rest is left to the next flush", "left", len(claimed)-i)
			break
		}
		f.publishClaimed(ctx, o, res)
	}
	if claimErr != nil {
		return false, fmt.Errorf("notify: claim: %w", claimErr)
	}
	return res.Failed == failedBefore, nil
}

// publishClaimed publishes o, which this flusher claimed, into res; one
// that fails is released for the next flush.
func (f *Flusher) publishClaimed(ctx context.Context, o *store.Outbox, res *Result) {
	var triaged bool
	var perr error
	if o.IsChange() {
		perr = f.publishChange(ctx, o)
	} else {
		triaged, perr = f.publish(ctx, o)
	}
	if triaged {
		res.Triaged++
	}
	switch {
	case perr == nil && o.IsChange():
		res.Changes++
		return
	case perr == nil:
		res.Published++
		return
	}
	res.Failed++
	res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", o.ID, perr))
	f.log.WarnContext(ctx, "notify: notification not published; the next flush retries it", "notification_id", o.ID, "kind", o.Kind, "tenant", o.Tenant, "error", perr.Error())
	if errors.Is(perr, store.ErrLeaseLost) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	if rerr := f.store.ReleaseNotification(rctx, o, f.owner, perr); rerr != nil {
		f.log.WarnContext(ctx, "notify: claim not released; it expires by itself", "notification_id", o.ID, "error", rerr.Error())
	}
	cancel()
}

// publish sends o's triage task (once) and o itself, and marks it
// published; triaged reports a triage task sent by this call.
func (f *Flusher) publish(ctx context.Context, o *store.Outbox) (triaged bool, err error) {
	n, err := o.Event()
	if err != nil {
		return false, err
	}
	if needsTriage(o, n) {
		if err := f.call(ctx, DestinationTriage, func(ctx context.Context) error { return f.triage(ctx, o, n) }); err != nil {
			return false, err
		}
		triaged = true
		if err := f.store.NotificationTriagePublished(ctx, o, f.owner); err != nil {
			return triaged, err
		}
	}
	if err := f.call(ctx, DestinationTopic, func(ctx context.Context) error {
		return f.topic.Publish(ctx, []byte(o.Notification), n.Attributes())
	}); err != nil {
		return triaged, fmt.Errorf("publish to the notifications topic: %w", err)
	}
	return triaged, f.store.NotificationPublished(ctx, o, f.owner)
}

// needsTriage reports whether o's triage task is still to be sent. A triage
// task that itself died is escalated like any task, but to a human by its
// notification only: another triage task for it could loop for as long as
// the triage agent fails.
func needsTriage(o *store.Outbox, n event.Notification) bool {
	return n.Kind.Triage() && !o.TriagePublished && o.TaskType != event.TriageTaskType
}

// paused is the error of a staged notification a paused destination keeps
// from being tried now, nil when every destination it needs may be called.
func (f *Flusher) paused(o *store.Outbox) error {
	if err := f.skip(DestinationTopic); err != nil {
		return err
	}
	if n, err := o.Event(); err == nil && needsTriage(o, n) {
		return f.skip(DestinationTriage)
	}
	return nil
}

// publishChange sends the change feed's row o to the feed's topic, with
// its attributes (the change_id one deduplicates a redelivery), and marks
// it published.
func (f *Flusher) publishChange(ctx context.Context, o *store.Outbox) error {
	if f.changes == nil {
		return errNoChangesTopic
	}
	r, err := o.Row()
	if err != nil {
		return err
	}
	if err := f.changes.Publish(ctx, []byte(o.Change), r.Attributes()); err != nil {
		return fmt.Errorf("publish to the change feed's topic: %w", err)
	}
	return f.store.NotificationPublished(ctx, o, f.owner)
}

// errNoChangesTopic is a feed row's failure at a flusher without the
// feed's topic (WithChanges): one it was staged for after a commit.
var errNoChangesTopic = errors.New("notify: no change feed topic to publish the row to")

// TriageMsg is the triage task of the entry notification n: on the triage
// agent's subject, with headers naming the entry and a Nats-Msg-Id that is
// the same for every publish of the same decision.
func TriageMsg(n event.Notification, taskType, action, consoleURL string) (*nats.Msg, error) {
	task := event.NewTriageTask(n, taskType, action, consoleURL)
	body, err := json.Marshal(task)
	if err != nil {
		return nil, fmt.Errorf("notify: encode triage task: %w", err)
	}
	m := nats.NewMsg(event.DefaultConventions.TaskSubject(task.Agent, event.TriageTaskType))
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, TriageMsgIDPrefix+n.ID)
	m.Header.Set(event.HeaderTaskID, n.EntryID)
	m.Header.Set(event.HeaderTenant, n.Tenant)
	m.Header.Set(event.HeaderAgent, task.Agent)
	m.Header.Set(event.HeaderTaskType, event.TriageTaskType)
	m.Header.Set(event.HeaderIdempotencyKey, TriageMsgIDPrefix+n.ID)
	m.Header.Set(event.HeaderTriageEntry, n.EntryID)
	return m, nil
}

func (f *Flusher) triage(ctx context.Context, o *store.Outbox, n event.Notification) error {
	if f.tasks == nil {
		return ErrNoTasks
	}
	tasks, err := f.tasks(ctx)
	if err != nil {
		return fmt.Errorf("notify: jetstream: %w", err)
	}
	m, err := TriageMsg(n, o.TaskType, o.Action, f.console)
	if err != nil {
		return err
	}
	if _, err := tasks.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish triage task to %s: %w", m.Subject, err)
	}
	return nil
}

// PubSubTopic is a Topic over a Pub/Sub publisher.
func PubSubTopic(p *pubsub.Publisher) Topic { return pubsubTopic{p} }

type pubsubTopic struct{ p *pubsub.Publisher }

func (t pubsubTopic) Publish(ctx context.Context, data []byte, attrs map[string]string) error {
	_, err := t.p.Publish(ctx, &pubsub.Message{Data: data, Attributes: attrs}).Get(ctx)
	return err
}

// LazyTopic is topic (a name, or a full "projects/..." path) of project,
// with a client made on the first publish, so a function that has nothing
// to publish never needs Pub/Sub credentials. Close stops it.
type LazyTopic struct {
	project, topic string
	opts           []option.ClientOption
	mu             sync.Mutex
	client         *pubsub.Client
	pub            *pubsub.Publisher
}

// NewLazyTopic returns a LazyTopic; opts point it at an emulator
// (clientopt.PubSubOptions).
func NewLazyTopic(project, topic string, opts ...option.ClientOption) *LazyTopic {
	if !strings.HasPrefix(topic, "projects/") {
		topic = "projects/" + project + "/topics/" + topic
	}
	return &LazyTopic{project: project, topic: topic, opts: opts}
}

// Publish publishes one message and waits for its acknowledgement.
func (t *LazyTopic) Publish(ctx context.Context, data []byte, attrs map[string]string) error {
	t.mu.Lock()
	if t.pub == nil {
		c, err := pubsub.NewClient(context.WithoutCancel(ctx), t.project, t.opts...)
		if err != nil {
			t.mu.Unlock()
			return fmt.Errorf("notify: pubsub client for %s: %w", t.project, err)
		}
		t.client, t.pub = c, c.Publisher(t.topic)
	}
	p := t.pub
	t.mu.Unlock()
	return pubsubTopic{p}.Publish(ctx, data, attrs)
}

// Close stops the publisher and the client, if one was made.
func (t *LazyTopic) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pub == nil {
		return nil
	}
	t.pub.Stop()
	return t.client.Close()
}
