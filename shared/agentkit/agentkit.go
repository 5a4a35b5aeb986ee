// Package agentkit is what an agent (a JetStream consumer of tasks) imports to
// die well (docs/bridge.md, "agentkit"; docs/contracts.md, "What an agentkit
// writes"):
//
//   - Terminate copies the message and the failure to the DLQ record stream,
//     waits for JetStream to confirm the copy, and only then terminates the
//     message (AckTerm). On a WorkQueue or Interest stream a TERM deletes the
//     message, so the copy is the only place its payload survives.
//   - Fail records why this delivery failed in the failure bucket and NAKs
//     with the delay the consumer's BackOff gives this delivery; when the
//     last delivery fails the bridge attaches this record to the max
//     deliveries advisory.
//   - Once makes a task's side effects happen once across redeliveries and
//     replays, recording completion in Firestore before the ack, under the
//     task's tenant and idempotency key (TaskOf).
//   - Budget.Check refuses a model call that cannot fit the context window
//     with the reason code context_window_overflow before spending tokens.
//   - Publish publishes a task; with WithPredictions it first consults the
//     learnt predictions (docs/predictions.md) and may apply the policy's
//     strategy before the first attempt or record the task in the DLQ with
//     reason predicted_failure.
//
// Every method that fails leaves the message to be redelivered: nothing is
// terminated that was not copied first.
package agentkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
)

// Defaults; the record stream and failure bucket are the bridge's
// (docs/configuration.md, "Bridge").
const (
	DefaultRecordStream          = event.DefaultRecordStream
	DefaultFailureBucket         = event.DefaultFailureBucket
	DefaultIdempotencyCollection = "task-idempotency"
	DefaultIdempotencyTTL        = 72 * time.Hour
)

// Reason codes agentkit itself produces (event's registry); the triage
// policy categorises them (docs/policy.md).
const (
	CodeContextWindowOverflow = event.ReasonContextWindowOverflow
)

// Errors.
var (
	// ErrRecordTooLarge: the record (payload plus headers) would exceed the
	// server's max payload. Terminate then records the failure with Fail
	// and NAKs instead: the message dies by max deliveries and the bridge
	// captures it from the stream, payload included.
	ErrRecordTooLarge = errors.New("agentkit: record exceeds the server's max payload")
	// ErrInProgress: another worker holds the idempotency claim of the key.
	ErrInProgress = errors.New("agentkit: task in progress elsewhere")
	// ErrNoFirestore: Once needs WithFirestore.
	ErrNoFirestore = errors.New("agentkit: Once needs a Firestore client (WithFirestore)")
)

// Failure is an agent's account of a failed attempt: the wire contract's one
// failure record. An agent sets Code (a reason code of the triage policy,
// docs/policy.md), Detail, CompletedSteps (side effects already made),
// ToolFailure (a tool call, not the model, failed: with completed steps a
// replay is unsafe) and Retryable (its own view over the policy's: false
// escalates a code the policy would replay, true lets a permanent code be
// replayed once). The kit fills Attempt, Agent and RecordedAt.
type Failure = event.Failure

// Kit binds agentkit to a JetStream connection and an agent name.
type Kit struct {
	js         jetstream.JetStream
	fs         *firestore.Client
	agent      string
	records    string
	bucket     string
	collection string
	ttl        time.Duration
	// lease overrides the claim's lease (0: LeaseIntervals keep-alive
	// intervals), keepAlive the keep-alive interval (0: from the consumer).
	lease, keepAlive time.Duration
	// legacyUntil ends the migration window: until then Once honours the
	// records older kits wrote under the key alone (zero: no end set).
	legacyUntil time.Time
	log         *slog.Logger
	now         func() time.Time

	kvOnce    sync.Mutex
	kv        jetstream.KeyValue
	consumers sync.Map // "<stream>/<consumer>" → consumerTiming

	// Publish's pre-flight (publish.go).
	work       string
	pred       *predictor
	flushEvery time.Duration
}

// Option configures New.
type Option func(*Kit)

// WithAgent names the agent in failure records.
func WithAgent(name string) Option { return func(k *Kit) { k.agent = name } }

// WithFirestore enables Once.
func WithFirestore(c *firestore.Client) Option { return func(k *Kit) { k.fs = c } }

// OpenFirestore opens the Firestore client WithFirestore takes, for the
// project (FIRESTORE_EMULATOR_HOST points it at the emulator), so an agent
// needs no database package of its own; the caller closes it.
func OpenFirestore(ctx context.Context, project string) (*firestore.Client, error) {
	c, err := firestore.NewClient(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("agentkit: firestore client for %q: %w", project, err)
	}
	return c, nil
}

// WithRecordStream names the stream records must land in (default DLQ_RECORDS).
func WithRecordStream(name string) Option { return func(k *Kit) { k.records = name } }

// WithFailureBucket names the failure bucket (default dlq_failures).
func WithFailureBucket(name string) Option { return func(k *Kit) { k.bucket = name } }

// WithIdempotencyCollection names Once's collection (default task-idempotency).
func WithIdempotencyCollection(name string) Option { return func(k *Kit) { k.collection = name } }

// WithLease overrides how long a Once claim blocks duplicates without a
// renewal. By default it is LeaseIntervals keep-alive intervals
// (WithKeepAlive): the claim is renewed every interval while fn runs, so
// the lease only bounds how long a worker that died holds the task. An
// override shorter than two intervals lets a duplicate take over a live
// claim whose renewal was late.
func WithLease(d time.Duration) Option { return func(k *Kit) { k.lease = d } }

// WithLegacyCompletionsUntil ends, at until, the window in which Once also
// honours the completion records older kits wrote under the idempotency key
// alone, with no tenant (docs/contracts.md, "Completion records before
// tenant scoping"). By default the window has no end: set it once no agent
// has run an older kit for 72 hours, and Once stops reading them (one
// document read fewer per claim). A time in the past turns them off.
func WithLegacyCompletionsUntil(until time.Time) Option {
	return func(k *Kit) { k.legacyUntil = until }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(k *Kit) { k.log = l } }

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(k *Kit) { k.now = now } }

// New returns a Kit.
func New(js jetstream.JetStream, opts ...Option) *Kit {
	k := &Kit{js: js, records: DefaultRecordStream, bucket: DefaultFailureBucket,
		collection: DefaultIdempotencyCollection, ttl: DefaultIdempotencyTTL,
		log: slog.New(slog.DiscardHandler), now: time.Now, work: DefaultWorkStream}
	for _, o := range opts {
		o(k)
	}
	k.startPredictions()
	return k
}

func (k *Kit) failure(md *jetstream.MsgMetadata, f Failure) event.Failure {
	f.Attempt, f.Agent, f.RecordedAt = int(md.NumDelivered), k.agent, k.now().UTC()
	return f
}

// Terminate copies msg and f to the record stream (subject
// dlq.records.<stream>, Nats-Msg-Id <stream>.<seq>, so a repeated Terminate
// of a redelivered message is deduplicated), waits for the publish ack and
// then terminates msg with reason "<code>: <detail>". If the copy fails the
// message is NAKed, not terminated, and the error returned: it will be
// redelivered and nothing is lost.
func (k *Kit) Terminate(ctx context.Context, msg jetstream.Msg, f Failure) error {
	if f.Code == "" {
		return errors.New("agentkit: Terminate needs a failure code")
	}
	md, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("agentkit: terminate: %w", err)
	}
	id := event.ID(md.Stream, md.Sequence.Stream)
	rec := event.Record{
		Meta: event.RecordMeta{Stream: md.Stream, StreamSeq: md.Sequence.Stream, Consumer: md.Consumer,
			Subject: msg.Subject(), PublishedAt: md.Timestamp.UTC(), Deliveries: md.NumDelivered,
			Failure: k.failure(md, f)},
		Headers: msg.Headers(),
		Data:    msg.Data(),
	}
	h, data, err := rec.Encode()
	if err != nil {
		k.nak(ctx, msg, md)
		return fmt.Errorf("agentkit: record %s: %w", id, err)
	}
	out := &nats.Msg{Subject: event.RecordSubject(md.Stream), Header: h, Data: data}
	if limit := k.js.Conn().MaxPayload(); limit > 0 && int64(recordSize(out)) > limit {
		ferr := k.Fail(ctx, msg, f)
		return errors.Join(fmt.Errorf("%w: record %s is %d bytes, limit %d; recorded and NAKed instead",
			ErrRecordTooLarge, id, recordSize(out), limit), ferr)
	}
	if _, err := k.js.PublishMsg(ctx, out, jetstream.WithExpectStream(k.records)); err != nil {
		k.nak(ctx, msg, md)
		return fmt.Errorf("agentkit: publish record %s to %s: %w (message NAKed, not terminated)", id, k.records, err)
	}
	if err := msg.TermWithReason(termReason(f)); err != nil {
		// The record is safe; a redelivery terminates again and the record
		// stream deduplicates the second copy.
		return fmt.Errorf("agentkit: term %s after recording it: %w", id, err)
	}
	return nil
}

func recordSize(m *nats.Msg) int {
	n := len(m.Data) + len(m.Subject) + len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// termReason is "<code>: <detail>", one line, short enough for an advisory.
func termReason(f Failure) string {
	r := f.Code
	if d := strings.Join(strings.Fields(f.Detail), " "); d != "" {
		r += ": " + d
	}
	if len(r) > 256 {
		r = r[:256]
	}
	return r
}

func (k *Kit) bucketKV(ctx context.Context) (jetstream.KeyValue, error) {
	k.kvOnce.Lock()
	defer k.kvOnce.Unlock()
	if k.kv != nil {
		return k.kv, nil
	}
	kv, err := k.js.KeyValue(ctx, k.bucket)
	if err != nil {
		return nil, fmt.Errorf("agentkit: bucket %s: %w", k.bucket, err)
	}
	k.kv = kv
	return kv, nil
}

// Fail records f for this delivery in the failure bucket (key
// <stream>.<seq>, the event id) and NAKs msg with the delay the consumer's
// BackOff gives this delivery (see Backoff). The record is written before the NAK so that it is
// in place when the last NAK exhausts MaxDeliver. A failed write still NAKs;
// the error is returned.
func (k *Kit) Fail(ctx context.Context, msg jetstream.Msg, f Failure) error {
	md, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("agentkit: fail: %w", err)
	}
	var errs []error
	if f.Code == "" {
		errs = append(errs, errors.New("agentkit: Fail needs a failure code"))
	} else if kv, err := k.bucketKV(ctx); err != nil {
		errs = append(errs, err)
	} else {
		val, err := json.Marshal(k.failure(md, f))
		if err == nil {
			_, err = kv.Put(ctx, event.ID(md.Stream, md.Sequence.Stream), val)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("agentkit: record failure of %s: %w", event.ID(md.Stream, md.Sequence.Stream), err))
		}
	}
	if err := k.nak(ctx, msg, md); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Backoff returns the NAK delay for a message's current delivery: the
// consumer's BackOff entry for it (the last entry beyond the list), and none
// on the last allowed delivery, whose NAK only ends the message (the server
// then sends the max deliveries advisory; waiting would just delay it).
func (k *Kit) Backoff(ctx context.Context, md *jetstream.MsgMetadata) time.Duration {
	r, ok := k.consumer(ctx, md)
	if !ok || len(r.backoff) == 0 || md.NumDelivered == 0 || (r.maxDeliver > 0 && md.NumDelivered >= uint64(r.maxDeliver)) {
		return 0
	}
	return r.backoff[min(int(md.NumDelivered)-1, len(r.backoff)-1)]
}

// consumerTiming is what the kit needs of a consumer's configuration.
type consumerTiming struct {
	backoff    []time.Duration
	maxDeliver int
	ackWait    time.Duration
}

// ackDeadline is how long the server waits for delivery n's ack before it
// redelivers: with a BackOff, the entry for the delivery (the server takes
// BackOff over AckWait; the last entry beyond the list), else AckWait.
func (c consumerTiming) ackDeadline(n uint64) time.Duration {
	if len(c.backoff) == 0 || n == 0 {
		return c.ackWait
	}
	return c.backoff[min(int(n)-1, len(c.backoff)-1)]
}

// consumer is the configuration of md's consumer, read once per consumer;
// ok is false when it cannot be read (logged).
func (k *Kit) consumer(ctx context.Context, md *jetstream.MsgMetadata) (consumerTiming, bool) {
	key := md.Stream + "/" + md.Consumer
	if v, ok := k.consumers.Load(key); ok {
		return v.(consumerTiming), true
	}
	if k.js == nil {
		return consumerTiming{}, false
	}
	c, err := k.js.Consumer(ctx, md.Stream, md.Consumer)
	if err != nil {
		k.log.Warn("consumer info unavailable; NAK without delay, keep-alive at the default interval",
			"stream", event.Wire(md.Stream), "consumer", event.Wire(md.Consumer), "error", err)
		return consumerTiming{}, false
	}
	cfg := c.CachedInfo().Config
	v := consumerTiming{backoff: cfg.BackOff, maxDeliver: cfg.MaxDeliver, ackWait: cfg.AckWait}
	k.consumers.Store(key, v)
	return v, true
}

func (k *Kit) nak(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata) error {
	var err error
	if d := k.Backoff(ctx, md); d > 0 {
		err = msg.NakWithDelay(d)
	} else {
		err = msg.Nak()
	}
	if err != nil {
		return fmt.Errorf("agentkit: nak %s: %w", event.ID(md.Stream, md.Sequence.Stream), err)
	}
	return nil
}
