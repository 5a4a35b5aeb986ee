// Package bridge forwards dead JetStream messages to Pub/Sub (SPEC §4): it
// reads consumer advisories (max deliveries, terminated) and agentkit's
// explicit DLQ records from their streams, turns each into one
// jsdlq.event.v1 event (fetching the original message and the last recorded
// failure) and publishes it, acknowledging the JetStream message only after
// Pub/Sub confirmed the publish.
//
// Delivery is at least once: a crash between the Pub/Sub confirmation and the
// JetStream ack republishes the event with the same id, which every consumer
// downstream deduplicates on.
package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxEventBytes is the default largest event the bridge publishes: Pub/Sub
// refuses messages over 10 MB (data plus attributes), and the payload grows by
// 4/3 in base64. A larger event is forwarded without its payload
// (message.truncated = true, size and sha256 kept), never dropped.
const MaxEventBytes = 9_500_000

// recordReadAheadBytes bounds the record payloads pulled ahead of processing.
const recordReadAheadBytes = 32 << 20

// Config configures a Bridge.
type Config struct {
	// Topic is the Pub/Sub topic, "projects/P/topics/T" or a topic id of the
	// client's project.
	Topic string
	Names
	Consumer string // durable consumer name on both streams
	// MaxInFlight bounds messages being forwarded at once (and the
	// consumers' max ack pending): the memory bound.
	MaxInFlight int
	// DeleteForwarded removes a max-delivered original from its source
	// stream once its event is confirmed. Off by default.
	DeleteForwarded bool
	// EnsureTopic creates the topic when it is missing, at start and after
	// a publish found it gone (an emulator restart). Off in production,
	// where Terraform owns the topic.
	EnsureTopic bool
	// MaxEventBytes overrides the MaxEventBytes default (tests).
	MaxEventBytes int
	// AckWait is the consumers' ack wait (default 45 s): how long the
	// messages a crashed bridge held stay invisible to its successor. It
	// bounds the work on one message, so the fetch and publish timeouts
	// default to fractions of it.
	AckWait time.Duration
	// FetchTimeout bounds one read of an original message (default
	// min(5 s, AckWait/8)).
	FetchTimeout time.Duration
	// DrainTimeout bounds forwarding in-flight messages after ctx ends
	// (default 8 s: Cloud Run allows 10 s after SIGTERM).
	DrainTimeout time.Duration
	// MaxNakDelay caps the redelivery delay after a failure (default 30 s).
	MaxNakDelay time.Duration
	// PublishTimeout bounds one publish including the client's retries
	// (default min(20 s, AckWait/2)); the message is then NAKed and waits
	// in JetStream.
	PublishTimeout time.Duration
	// Conventions names the tenant and agent headers.
	Conventions event.Conventions
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

func (c *Config) defaults() error {
	if c.Topic == "" || c.AdvisoryStream == "" || c.RecordStream == "" || c.FailureBucket == "" || c.Consumer == "" {
		return errors.New("bridge: topic, streams, bucket and consumer are required")
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 256
	}
	if c.MaxEventBytes <= 0 {
		c.MaxEventBytes = MaxEventBytes
	}
	if c.AckWait <= 0 {
		c.AckWait = 45 * time.Second
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = min(5*time.Second, c.AckWait/8)
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 8 * time.Second
	}
	if c.MaxNakDelay <= 0 {
		c.MaxNakDelay = 30 * time.Second
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = min(20*time.Second, c.AckWait/2)
	}
	if c.AckWait < c.PublishTimeout+2*c.FetchTimeout {
		return fmt.Errorf("bridge: ack wait %s must exceed the publish timeout %s plus two fetch timeouts %s",
			c.AckWait, c.PublishTimeout, c.FetchTimeout)
	}
	if c.Conventions.TenantHeader == "" {
		c.Conventions = event.DefaultConventions
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Bridge forwards dead messages; build it with New, run it with Run.
type Bridge struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	ps    *pubsub.Client
	topic string
	pub   *pubsub.Publisher
	log   *slog.Logger
	m     *metrics

	sources   *sourceReader
	kv        atomic.Pointer[jetstream.KeyValue]
	ready     atomic.Bool // resources ensured, consumers running
	pubFailed atomic.Bool // the last publish attempt failed
	lastTopic atomic.Int64
	cons      sync.Map // stream name → jetstream.Consumer
}

// New returns a bridge over a NATS connection and a Pub/Sub client. It
// installs an async error hook on nc to learn which streams the bridge's
// credentials may not read (NATS reports permission violations only there).
func New(cfg Config, nc *nats.Conn, ps *pubsub.Client, log *slog.Logger) (*Bridge, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bridge: jetstream: %w", err)
	}
	topic := cfg.Topic
	if !strings.HasPrefix(topic, "projects/") {
		topic = "projects/" + ps.Project() + "/topics/" + topic
	}
	b := &Bridge{cfg: cfg, nc: nc, js: js, ps: ps, topic: topic, log: log, m: newMetrics()}
	b.sources = newSourceReader(js, cfg.FetchTimeout, log)
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		b.sources.noteAsyncError(err)
		if prev != nil {
			prev(c, s, err)
		}
	})
	b.pub = ps.Publisher(topic)
	b.pub.PublishSettings.CountThreshold = 100
	b.pub.PublishSettings.DelayThreshold = 5 * time.Millisecond
	b.pub.PublishSettings.ByteThreshold = 5_000_000
	// A publish that cannot complete in this time is NAKed and retried from
	// JetStream, where the message waits safely.
	b.pub.PublishSettings.Timeout = cfg.PublishTimeout
	b.pub.PublishSettings.FlowControlSettings = pubsub.FlowControlSettings{
		MaxOutstandingMessages: cfg.MaxInFlight,
		MaxOutstandingBytes:    -1,
		LimitExceededBehavior:  pubsub.FlowControlBlock,
	}
	return b, nil
}

// Counts returns the bridge's counters.
func (b *Bridge) Counts() Counts { return b.m.snapshot() }

// Healthy reports whether the bridge is connected to NATS, has set up its
// resources and its last publish attempt succeeded.
func (b *Bridge) Healthy() (bool, string) {
	switch {
	case !b.nc.IsConnected():
		return false, "nats: " + b.nc.Status().String()
	case !b.ready.Load():
		return false, "starting"
	case b.pubFailed.Load():
		return false, "pubsub: last publish failed"
	}
	return true, "ok"
}

// Handler serves /healthz and /metrics.
func (b *Bridge) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := b.Healthy()
		if !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, why)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		b.updateLag(ctx)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		b.m.write(w)
	})
	return mux
}

func (b *Bridge) updateLag(ctx context.Context) {
	b.cons.Range(func(k, v any) bool {
		info, err := v.(jetstream.Consumer).Info(ctx)
		if err == nil {
			b.m.setLag(k.(string), info.NumPending+uint64(info.NumAckPending))
		}
		return true
	})
}

// Run sets up the streams, bucket, topic and consumers, then forwards until
// ctx ends; it then stops pulling, finishes what is in flight (bounded by
// DrainTimeout) and flushes the publisher.
func (b *Bridge) Run(ctx context.Context) error {
	if err := Ensure(ctx, b.js, b.cfg.Names, b.log); err != nil {
		return err
	}
	kv, err := b.js.KeyValue(ctx, b.cfg.FailureBucket)
	if err != nil {
		return fmt.Errorf("bridge: bucket %s: %w", b.cfg.FailureBucket, err)
	}
	b.kv.Store(&kv)
	if err := b.checkTopic(ctx); err != nil {
		return err
	}
	type source struct {
		stream string
		build  func(context.Context, jetstream.Msg) (event.Event, error)
		pull   jetstream.PullMessagesOpt
		it     jetstream.MessagesContext
	}
	batch := min(b.cfg.MaxInFlight, 500)
	sources := []*source{
		{stream: b.cfg.AdvisoryStream, build: b.fromAdvisory, pull: jetstream.PullMaxMessages(batch)},
		// Records carry payloads: their read-ahead is bounded in bytes too.
		{stream: b.cfg.RecordStream, build: b.fromRecord,
			pull: jetstream.PullMaxMessagesWithBytesLimit(batch, recordReadAheadBytes)},
	}
	for _, src := range sources {
		stream := src.stream
		c, err := b.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable:     b.cfg.Consumer,
			Description: "jsdlq bridge: forwards to Pub/Sub",
			AckPolicy:   jetstream.AckExplicitPolicy,
			AckWait:     b.cfg.AckWait,
			MaxDeliver:  -1, // a Pub/Sub outage must never make the bridge drop input
			// Twice the in-flight bound: after a crash, the messages the
			// dead instance held stay pending for AckWait, and the
			// successor must not wait for them to start.
			MaxAckPending: 2 * b.cfg.MaxInFlight,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("bridge: consumer %s on %s: %w", b.cfg.Consumer, stream, err)
		}
		b.cons.Store(stream, c)
		it, err := c.Messages(src.pull)
		if err != nil {
			return fmt.Errorf("bridge: pull %s: %w", stream, err)
		}
		defer it.Stop()
		src.it = it
	}
	b.ready.Store(true)
	b.log.Info("bridge ready", "topic", b.topic, "advisory_stream", b.cfg.AdvisoryStream,
		"record_stream", b.cfg.RecordStream, "consumer", b.cfg.Consumer, "max_in_flight", b.cfg.MaxInFlight)

	// Work outlives ctx by DrainTimeout so that in-flight messages finish.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	sem := make(chan struct{}, b.cfg.MaxInFlight)
	fatal := make(chan error, 1)
	var inflight sync.WaitGroup
	var loops sync.WaitGroup
	for _, src := range sources {
		stream, build, it := src.stream, src.build, src.it
		loops.Add(1)
		go func() {
			defer loops.Done()
			for {
				msg, err := it.Next()
				if err != nil {
					switch {
					case errors.Is(err, jetstream.ErrMsgIteratorClosed):
						return
					case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConnectionClosed):
						// Not recoverable in place: end Run with the error so
						// the process restarts and recreates its consumer.
						select {
						case fatal <- fmt.Errorf("bridge: pull %s: %w", stream, err):
						default:
						}
						return
					}
					b.log.Warn("pull failed; retrying", "stream", stream, "error", err)
					time.Sleep(200 * time.Millisecond)
					continue
				}
				sem <- struct{}{}
				b.m.inFlight.Add(1)
				inflight.Add(1)
				go func() {
					defer func() { <-sem; b.m.inFlight.Add(-1); inflight.Done() }()
					b.forward(work, msg, build)
				}()
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-fatal:
		b.log.Error("stopping: a consumer cannot continue", "error", runErr)
	}
	b.log.Info("draining", "in_flight", b.m.inFlight.Load())
	for _, src := range sources {
		src.it.Drain()
	}
	done := make(chan struct{})
	go func() { loops.Wait(); inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(b.cfg.DrainTimeout):
		b.log.Warn("drain timeout: unfinished messages will be redelivered", "in_flight", b.m.inFlight.Load())
		cancelWork()
		<-done
	}
	b.pub.Stop()
	b.ready.Store(false)
	b.log.Info("bridge stopped", "counts", b.m.snapshot())
	return runErr
}

// errReject marks input that can never be forwarded: it is logged, counted
// and acknowledged, so it is not redelivered forever.
type errReject struct {
	reason string
	err    error
}

func (e *errReject) Error() string { return e.reason + ": " + e.err.Error() }
func (e *errReject) Unwrap() error { return e.err }

func reject(reason string, err error) error { return &errReject{reason: reason, err: err} }

// errRetry marks a failure worth retrying later (NAK with delay).
type errRetry struct {
	reason string
	err    error
}

func (e *errRetry) Error() string { return e.reason + ": " + e.err.Error() }
func (e *errRetry) Unwrap() error { return e.err }

func retry(reason string, err error) error { return &errRetry{reason: reason, err: err} }

func (b *Bridge) forward(ctx context.Context, msg jetstream.Msg, build func(context.Context, jetstream.Msg) (event.Event, error)) {
	ev, err := build(ctx, msg)
	if err == nil {
		var out *pubsub.Message
		out, err = b.encode(&ev)
		if err == nil {
			err = b.publish(ctx, out)
		}
	}
	var rj *errReject
	var rt *errRetry
	switch {
	case err == nil:
		if b.cfg.DeleteForwarded && ev.Kind == event.KindMaxDeliver && !ev.Message.Missing {
			b.deleteOriginal(ctx, ev)
		}
		if err := msg.Ack(); err != nil {
			// The event is out; a redelivery republishes it with the same id.
			b.log.Warn("ack failed after publish; the event may be sent twice", "event_id", ev.ID, "error", err)
		}
		b.m.inc(b.m.forwarded, string(ev.Kind))
	case errors.As(err, &rj):
		b.log.Error("rejected input: acknowledged and dropped", "reason", rj.reason, "error", rj.err,
			"subject", msg.Subject(), "data", truncateForLog(msg.Data()))
		b.m.inc(b.m.rejected, rj.reason)
		if err := msg.Ack(); err != nil {
			b.log.Warn("ack of rejected input failed", "error", err)
		}
	default:
		reason := "error"
		if errors.As(err, &rt) {
			reason = rt.reason
		}
		delay := b.nakDelay(msg)
		b.log.Warn("forward failed; will retry", "reason", reason, "error", err, "retry_in", delay.String(),
			"event_id", ev.ID)
		b.m.inc(b.m.failed, reason)
		if err := msg.NakWithDelay(delay); err != nil {
			b.log.Warn("nak failed; redelivered after ack wait", "error", err)
		}
	}
}

// nakDelay grows with the delivery count: 1 s, 2 s, 4 s … MaxNakDelay, with
// jitter so a recovered Pub/Sub does not see every message at once.
func (b *Bridge) nakDelay(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	d := b.cfg.MaxNakDelay
	if n < 16 {
		d = min(time.Second<<(n-1), b.cfg.MaxNakDelay)
	}
	return d/2 + rand.N(d/2+1)
}

func truncateForLog(b []byte) string {
	const max = 512
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// encode returns the Pub/Sub message carrying the event, omitting the
// payload (then the headers) when it would exceed MaxEventBytes. The
// attributes are built once: truncation changes neither them nor their size.
func (b *Bridge) encode(ev *event.Event) (*pubsub.Message, error) {
	data, err := event.Encode(*ev)
	if err != nil {
		return nil, reject("invalid_event", err)
	}
	attrs := ev.Attributes()
	limit := b.cfg.MaxEventBytes - attrSize(attrs)
	if len(data) <= limit {
		return &pubsub.Message{Data: data, Attributes: attrs}, nil
	}
	b.log.Warn("event exceeds the Pub/Sub limit: forwarding it without the payload", "event_id", ev.ID,
		"size", ev.Message.Size, "event_bytes", len(data))
	ev.Message.Truncate()
	if data, err = event.Encode(*ev); err != nil {
		return nil, reject("invalid_event", err)
	}
	if len(data) > limit {
		ev.Message.Headers = nil
		if data, err = event.Encode(*ev); err != nil {
			return nil, reject("invalid_event", err)
		}
	}
	return &pubsub.Message{Data: data, Attributes: attrs}, nil
}

func attrSize(a map[string]string) int {
	n := 0
	for k, v := range a {
		n += len(k) + len(v)
	}
	return n
}

func (b *Bridge) publish(ctx context.Context, m *pubsub.Message) error {
	res := b.pub.Publish(ctx, m)
	_, err := res.Get(ctx)
	if err != nil {
		b.pubFailed.Store(true)
		if status.Code(err) == codes.NotFound && b.cfg.EnsureTopic {
			b.recreateTopic(ctx)
		}
		return retry("publish", err)
	}
	b.pubFailed.Store(false)
	return nil
}

// checkTopic verifies (or, with EnsureTopic, creates) the topic at start.
func (b *Bridge) checkTopic(ctx context.Context) error {
	_, err := b.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: b.topic})
	if status.Code(err) == codes.NotFound && b.cfg.EnsureTopic {
		_, err = b.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: b.topic})
		if status.Code(err) == codes.AlreadyExists {
			err = nil
		}
		if err == nil {
			b.log.Info("created topic", "topic", b.topic)
		}
	}
	if err != nil {
		return fmt.Errorf("bridge: topic %s: %w", b.topic, err)
	}
	return nil
}

// recreateTopic restores a topic that vanished (an emulator restart), at
// most once every two seconds however many publishes failed.
func (b *Bridge) recreateTopic(ctx context.Context) {
	now := time.Now().UnixNano()
	last := b.lastTopic.Load()
	if now-last < int64(2*time.Second) || !b.lastTopic.CompareAndSwap(last, now) {
		return
	}
	_, err := b.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: b.topic})
	switch status.Code(err) {
	case codes.OK:
		b.log.Warn("topic was missing: recreated it (ensure-topic)", "topic", b.topic)
	case codes.AlreadyExists:
	default:
		b.log.Warn("recreate topic failed", "topic", b.topic, "error", err)
	}
}

func (b *Bridge) deleteOriginal(ctx context.Context, ev event.Event) {
	err := b.sources.delete(ctx, ev.Stream, ev.StreamSeq)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		b.m.inc(b.m.failed, "delete")
		b.log.Warn("delete-forwarded: could not delete the original", "event_id", ev.ID, "error", err)
	}
}

// advisory is a consumer advisory as received; unknown fields are ignored so
// that a newer server does not make the bridge refuse its advisories.
type advisory struct {
	Type        string    `json:"type"`
	ID          string    `json:"id"`
	Timestamp   time.Time `json:"timestamp"`
	Stream      string    `json:"stream"`
	Consumer    string    `json:"consumer"`
	ConsumerSeq uint64    `json:"consumer_seq"`
	StreamSeq   uint64    `json:"stream_seq"`
	Deliveries  uint64    `json:"deliveries"`
	Reason      string    `json:"reason"`
	Domain      string    `json:"domain"`
}

func parseAdvisory(data []byte) (event.Advisory, event.Kind, error) {
	var a advisory
	if err := json.Unmarshal(data, &a); err != nil {
		return event.Advisory{}, "", reject("malformed_advisory", err)
	}
	var kind event.Kind
	switch a.Type {
	case event.AdvisoryMaxDeliver:
		kind = event.KindMaxDeliver
	case event.AdvisoryTerminated:
		kind = event.KindTerminated
	default:
		return event.Advisory{}, "", reject("unknown_advisory", fmt.Errorf("advisory type %q", a.Type))
	}
	// The characters the JetStream client refuses in a stream name: an
	// advisory naming such a stream can never be fetched, and a fetch error
	// would be retried forever.
	if a.Stream == "" || a.StreamSeq == 0 || strings.ContainsAny(a.Stream, ">*. /\\\t\r\n") {
		return event.Advisory{}, "", reject("malformed_advisory", fmt.Errorf("advisory without a valid stream and stream_seq"))
	}
	if a.Timestamp.IsZero() {
		return event.Advisory{}, "", reject("malformed_advisory", fmt.Errorf("advisory without timestamp"))
	}
	return event.Advisory{
		Type: a.Type, ID: a.ID, Timestamp: a.Timestamp.UTC(), Stream: a.Stream, Consumer: a.Consumer,
		ConsumerSeq: a.ConsumerSeq, StreamSeq: a.StreamSeq, Deliveries: a.Deliveries, Reason: a.Reason, Domain: a.Domain,
	}, kind, nil
}

func (b *Bridge) fromAdvisory(ctx context.Context, msg jetstream.Msg) (event.Event, error) {
	adv, kind, err := parseAdvisory(msg.Data())
	if err != nil {
		return event.Event{}, err
	}
	ev := event.Event{
		Schema:     event.Schema,
		ID:         event.ID(adv.Stream, adv.StreamSeq),
		Kind:       kind,
		Stream:     adv.Stream,
		StreamSeq:  adv.StreamSeq,
		Consumer:   adv.Consumer,
		Advisory:   &adv,
		ObservedAt: b.cfg.Now().UTC(),
	}
	orig, missing, err := b.sources.get(ctx, adv.Stream, adv.StreamSeq)
	if err != nil {
		return ev, retry("fetch", err)
	}
	var headers map[string][]string
	if missing != "" {
		ev.Message.SetMissing(missing)
		if missing == event.MissingPermissionDenied {
			b.log.Error("the bridge may not read this stream: forwarding the event without the message; grant $JS.API.DIRECT.GET and $JS.API.STREAM.MSG.GET / INFO on it",
				"stream", adv.Stream, "event_id", ev.ID)
		}
	} else {
		headers = orig.Header
		ev.Message.Subject = orig.Subject
		ev.Message.Headers = event.EncodeHeaders(headers)
		t := orig.Time.UTC()
		ev.Message.PublishedAt = &t
		ev.Message.SetPayload(orig.Data)
	}
	ev.Tenant = b.cfg.Conventions.Tenant(headers)
	ev.Agent = b.cfg.Conventions.Agent(ev.Message.Subject, headers)
	f, err := b.failure(ctx, ev.ID)
	if err != nil {
		return ev, retry("kv", err)
	}
	ev.Failure = f
	if ev.Agent == "" && f != nil {
		ev.Agent = f.Agent
	}
	return ev, nil
}

// failure returns the last failure agentkit.Fail recorded for the message.
// An unreadable record is logged and ignored: it must not block the event.
func (b *Bridge) failure(ctx context.Context, key string) (*event.Failure, error) {
	kv := *b.kv.Load()
	entry, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failure record %s: %w", key, err)
	}
	var f event.Failure
	if err := json.Unmarshal(entry.Value(), &f); err != nil || f.Code == "" {
		b.log.Warn("ignoring an unreadable failure record", "key", key, "error", err)
		return nil, nil
	}
	return &f, nil
}

func (b *Bridge) fromRecord(ctx context.Context, msg jetstream.Msg) (event.Event, error) {
	r, err := event.ParseRecord(msg.Headers(), msg.Data())
	if err != nil {
		return event.Event{}, reject("malformed_record", err)
	}
	return r.Event(b.cfg.Conventions, b.cfg.Now()), nil
}
