package agentkit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
)

// This file is the producer's side: Publish publishes a task to the work
// stream, and with WithPredictions it runs the pre-flight first
// (docs/predictions.md): it counts the task in its feature buckets (in
// memory, flushed as blind increments) and looks it up in the cached model
// (refreshed on a timer), which may apply the policy's strategy for the
// predicted reason before the first attempt or route the task to the DLQ
// at once. No Firestore read or write is made per task, and a model that
// cannot be read only means tasks are published without predictions.

// Defaults of the pre-flight.
const (
	DefaultWorkStream = event.DefaultWorkStream
	// DefaultCountFlush is how often the task counts are written.
	DefaultCountFlush = time.Minute
)

// WithPredictions turns Publish's pre-flight on: the model is read every
// refresh (and the work stream's pending counts with it), the tasks
// published are counted for the learner. It needs WithFirestore.
func WithPredictions(refresh time.Duration) Option {
	return func(k *Kit) {
		if refresh <= 0 {
			refresh = 5 * time.Minute
		}
		k.pred = &predictor{refresh: refresh, flush: DefaultCountFlush}
	}
}

// WithCountFlush sets how often the pre-flight writes its task counts
// (default one minute); Close writes the rest.
func WithCountFlush(d time.Duration) Option { return func(k *Kit) { k.flushEvery = d } }

// WithWorkStream names the stream Publish publishes tasks to (default
// TASKS); a task routed to the DLQ is recorded as a task of it.
func WithWorkStream(name string) Option { return func(k *Kit) { k.work = name } }

// ErrNoPredictions: RefreshPredictions needs WithPredictions and
// WithFirestore.
var ErrNoPredictions = errors.New("agentkit: predictions need WithPredictions and WithFirestore")

// predictor is the pre-flight's state: the cached model and pending counts
// (swapped whole by the refresher) and the counts not yet written.
type predictor struct {
	refresh, flush time.Duration
	table          atomic.Pointer[predict.Table]
	pending        atomic.Pointer[map[string]uint64]

	// refreshing serialises refreshes; started says one has run, so the
	// loop's first refresh is skipped when the caller already refreshed
	// (a late background read would otherwise replace the caller's view of
	// the work stream with a later one while it publishes).
	refreshing sync.Mutex
	started    bool

	mu     sync.Mutex
	counts map[countDoc]map[predict.Key]int64

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// countDoc names a predict.Counts document: one agent, one hour.
type countDoc struct {
	agent string
	hour  time.Time
}

func (k *Kit) startPredictions() {
	if k.pred == nil {
		return
	}
	if k.fs == nil {
		k.log.Warn("agentkit: WithPredictions without WithFirestore; Publish publishes without predictions")
		return
	}
	if k.flushEvery > 0 {
		k.pred.flush = k.flushEvery
	}
	k.pred.counts = map[countDoc]map[predict.Key]int64{}
	k.pred.stop, k.pred.done = make(chan struct{}), make(chan struct{})
	go k.predictLoop()
}

func (k *Kit) predictLoop() {
	defer close(k.pred.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-k.pred.stop; cancel() }()
	_ = k.refreshPredictions(ctx, true)
	refresh, flush := time.NewTicker(k.pred.refresh), time.NewTicker(k.pred.flush)
	defer refresh.Stop()
	defer flush.Stop()
	for {
		select {
		case <-k.pred.stop:
			return
		case <-refresh.C:
			_ = k.RefreshPredictions(ctx)
		case <-flush.C:
			if err := k.FlushCounts(ctx); err != nil {
				k.log.Warn("prediction counts not written; kept for the next flush", "error", err)
			}
		}
	}
}

// Close stops the pre-flight's timers and writes the counts not yet
// written. A Kit without WithPredictions has nothing to close.
func (k *Kit) Close(ctx context.Context) error {
	if k.pred == nil || k.pred.stop == nil {
		return nil
	}
	k.pred.stopOnce.Do(func() { close(k.pred.stop) })
	<-k.pred.done
	return k.FlushCounts(ctx)
}

// RefreshPredictions reads the model and the work stream's pending tasks
// per agent now (the timer calls it every refresh). On an error the last
// model read stays in use (none before the first): publishing never waits
// for it.
func (k *Kit) RefreshPredictions(ctx context.Context) error {
	return k.refreshPredictions(ctx, false)
}

// refreshPredictions refreshes; first is the loop's refresh at start, done
// only if no refresh has run yet.
func (k *Kit) refreshPredictions(ctx context.Context, first bool) error {
	if k.pred == nil || k.fs == nil {
		return ErrNoPredictions
	}
	k.pred.refreshing.Lock()
	defer k.pred.refreshing.Unlock()
	if first && k.pred.started {
		return nil
	}
	k.pred.started = true
	var errs []error
	snap, err := k.fs.Collection(predict.ModelCollection).Doc(predict.ModelDoc).Get(ctx)
	switch {
	case status.Code(err) == codes.NotFound:
		k.pred.table.Store(predict.NewTable(predict.Model{}))
	case err != nil:
		errs = append(errs, fmt.Errorf("agentkit: read prediction model: %w", err))
	default:
		var m predict.Model
		if err := snap.DataTo(&m); err != nil {
			errs = append(errs, fmt.Errorf("agentkit: decode prediction model: %w", err))
		} else {
			k.pred.table.Store(predict.NewTable(m))
		}
	}
	if pending, err := k.pendingPerAgent(ctx); err != nil {
		errs = append(errs, err)
	} else {
		k.pred.pending.Store(&pending)
	}
	err = errors.Join(errs...)
	if err != nil {
		k.log.Warn("predictions not refreshed; publishing with the last ones read", "error", err)
	}
	return err
}

// pendingPerAgent sums the work stream's messages per agent subject token:
// on a work-queue stream they are the tasks not yet done.
func (k *Kit) pendingPerAgent(ctx context.Context) (map[string]uint64, error) {
	if k.js == nil {
		return nil, errors.New("agentkit: no JetStream to read pending tasks from")
	}
	s, err := k.js.Stream(ctx, k.work)
	if err != nil {
		return nil, fmt.Errorf("agentkit: stream %s: %w", k.work, err)
	}
	prefix := event.DefaultConventions.AgentSubjectPrefix
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+".*.tasks.>"))
	if err != nil {
		return nil, fmt.Errorf("agentkit: pending tasks of %s: %w", k.work, err)
	}
	out := map[string]uint64{}
	for subject, n := range info.State.Subjects {
		if sub, ok := event.DefaultConventions.ParseSubject(subject); ok {
			out[sub.Agent] += n
		}
	}
	return out, nil
}

// count adds a task with features f published at hour to the counts.
func (p *predictor) count(f predict.Features, at time.Time) {
	d := countDoc{agent: f.Agent, hour: at.UTC().Truncate(time.Hour)}
	keys := f.Keys()
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.counts[d]
	if c == nil {
		c = map[predict.Key]int64{}
		p.counts[d] = c
	}
	for _, key := range keys {
		c[key]++
	}
}

// FlushCounts writes the counts kept since the last flush: one write per
// agent and hour, blind increments (no read). Counts that could not be
// written are kept for the next flush; a write that failed after Firestore
// applied it is counted twice, which only makes a probability a little
// lower (the learner never predicts from counts alone).
func (k *Kit) FlushCounts(ctx context.Context) error {
	if k.pred == nil || k.fs == nil {
		return nil
	}
	k.pred.mu.Lock()
	pending := k.pred.counts
	k.pred.counts = map[countDoc]map[predict.Key]int64{}
	k.pred.mu.Unlock()
	var errs []error
	for d, cells := range pending {
		inc := make(map[string]any, len(cells))
		for key, n := range cells {
			inc[key.String()] = firestore.Increment(n)
		}
		ref := k.fs.Collection(predict.CountsCollection).Doc(predict.CountsDocID(d.agent, d.hour))
		_, err := ref.Set(ctx, map[string]any{"agent": d.agent, "hour": d.hour, "cells": inc,
			"expire_at": d.hour.Add(predict.CountsRetention)}, firestore.MergeAll)
		if err == nil {
			continue
		}
		errs = append(errs, fmt.Errorf("agentkit: write %s/%s: %w", predict.CountsCollection, ref.ID, err))
		k.pred.mu.Lock()
		c := k.pred.counts[d]
		if c == nil {
			c = map[predict.Key]int64{}
			k.pred.counts[d] = c
		}
		for key, n := range cells {
			c[key] += n
		}
		k.pred.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Published is what Publish did with a task.
type Published struct {
	// Ack is the work stream's ack, or the record stream's when the task
	// was routed to the DLQ.
	Ack *jetstream.PubAck
	// Subject is the subject published to (another agent's when the
	// strategy hands the task over; the record subject when routed).
	Subject string
	// Prediction is the model's row for the task when Predicted.
	Prediction predict.Prediction
	Predicted  bool
	// Routed: the task went to the DLQ (reason predicted_failure) instead
	// of the work stream.
	Routed bool
}

// Publish publishes a task (payload and headers; headers may be nil) to
// subject on the work stream and waits for the ack. With WithPredictions:
//
//   - no prediction: the task is published as it is, marked counted
//     (event.HeaderCounted) and with the agent's pending tasks
//     (event.HeaderPending), and counted;
//   - an advisory prediction: the same, plus the Jsdlq-Predicted-* headers;
//   - action strategy: the strategy's Jsdlq-* headers (as a replay would
//     carry them, to the other agent's subject if it names one) and the
//     Jsdlq-Predicted-* headers; not counted: the learner learns from
//     untreated tasks;
//   - action dlq: the full task is recorded on the DLQ record stream (the
//     record Terminate writes, reason predicted_failure, the prediction in
//     its detail), acknowledged there, never published to the work stream;
//     it is replayed as the policy says. A record the server cannot take
//     (too large) is published to the work stream instead: no prediction
//     ever drops a task.
//
// Jsdlq-* headers the caller passes are dropped: they are jsdlq's to set.
//
// A task with an idempotency key (event.Conventions.IdempotencyKey) is
// published with Nats-Msg-Id = IdempotencyDocID(tenant, key), unless the
// caller set one: a retry of the publish within the work stream's duplicate
// window is dropped by JetStream, so it yields one task, while two tenants'
// tasks with one key have two ids and are two tasks. A task without a key
// gets no Nats-Msg-Id: every publish of it is a new task.
func (k *Kit) Publish(ctx context.Context, subject string, payload []byte, headers map[string][]string) (Published, error) {
	msg := &nats.Msg{Subject: subject, Data: payload, Header: make(nats.Header, len(headers)+6)}
	for name, vs := range headers {
		if k.pred == nil || !event.IsReplayHeader(name) {
			msg.Header[name] = append([]string(nil), vs...)
		}
	}
	setMsgID(msg.Header)
	if k.pred == nil || k.fs == nil {
		ack, err := k.js.PublishMsg(ctx, msg)
		if err != nil {
			return Published{}, fmt.Errorf("agentkit: publish to %s: %w", subject, err)
		}
		return Published{Ack: ack, Subject: subject}, nil
	}
	out, route := k.predictTask(msg, k.now())
	if route {
		res, err := k.routeToDLQ(ctx, msg, out, k.now())
		if !errors.Is(err, ErrRecordTooLarge) {
			return res, err
		}
		k.log.Warn("task predicted to fail is too large to record; published to run instead", "subject", event.Wire(subject), "error", err)
		out.Routed = false
	}
	ack, err := k.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(k.work))
	if err != nil {
		return Published{}, fmt.Errorf("agentkit: publish to %s: %w", msg.Subject, err)
	}
	out.Ack, out.Subject = ack, msg.Subject
	return out, nil
}

// predictTask marks, treats or counts the task in msg (changing its headers
// and subject) and reports whether it is to be routed to the DLQ.
func (k *Kit) predictTask(msg *nats.Msg, now time.Time) (Published, bool) {
	c := event.DefaultConventions
	h := map[string][]string(msg.Header)
	if pm := k.pred.pending.Load(); pm != nil {
		if n, ok := (*pm)[c.Agent(msg.Subject, h)]; ok {
			h[event.HeaderPending] = []string{strconv.FormatUint(n, 10)}
		} else {
			h[event.HeaderPending] = []string{"0"}
		}
	}
	f := predict.FeaturesOf(c, msg.Subject, h, len(msg.Data), now)
	// One table for the whole task: a refresh landing meanwhile must not
	// mark the task with another model's version.
	table := k.pred.table.Load()
	p, ok := table.Lookup(f)
	out := Published{Prediction: p, Predicted: ok}
	switch {
	case ok && p.Action == predict.ActionDLQ:
		delete(h, event.HeaderPending)
		markPredicted(h, p, table.Model().Version)
		return out, true
	case ok && p.Action == predict.ActionStrategy:
		p.Replay.Set(h)
		markPredicted(h, p, table.Model().Version)
		if p.AlternateAgent != "" && p.AlternateAgent != f.Agent {
			msg.Subject = c.TaskSubject(p.AlternateAgent, f.TaskType)
			c.Reassign(h, p.AlternateAgent)
		}
		return out, false
	}
	if ok {
		markPredicted(h, p, table.Model().Version)
	}
	if f.Agent != "" {
		h[event.HeaderCounted] = []string{"1"}
		k.pred.count(f, now)
	}
	return out, false
}

// setMsgID sets h's Nats-Msg-Id from the task's tenant and idempotency
// key (Publish), unless h has one or the task has no key.
func setMsgID(h nats.Header) {
	if event.Header(h, nats.MsgIdHdr) != "" {
		return
	}
	c := event.DefaultConventions
	if key := c.IdempotencyKey(h); key != "" {
		h[nats.MsgIdHdr] = []string{IdempotencyDocID(c.Tenant(h), key)}
	}
}

func markPredicted(h map[string][]string, p predict.Prediction, version int64) {
	h[event.HeaderPredictedReason] = []string{p.Reason}
	h[event.HeaderPredictedProbability] = []string{strconv.FormatFloat(p.Probability, 'f', 2, 64)}
	h[event.HeaderPredictedVersion] = []string{strconv.FormatInt(version, 10)}
}

// routeToDLQ records the task on the record stream as a dead task of the
// work stream with reason predicted_failure, and waits for the ack.
func (k *Kit) routeToDLQ(ctx context.Context, msg *nats.Msg, out Published, now time.Time) (Published, error) {
	p := out.Prediction
	c := event.DefaultConventions
	seq := predictedSeq(c.Tenant(msg.Header), c.IdempotencyKey(msg.Header))
	detail := fmt.Sprintf("predicted %s with probability %.2f (at least %.2f): %d of %d tasks of %s/%s with %s %s died, model version %s",
		p.Reason, p.Probability, p.Confidence, p.Deaths, p.Tasks, p.Agent, p.TaskType, p.Feature, p.Bucket,
		msg.Header.Get(event.HeaderPredictedVersion))
	rec := event.Record{
		Meta: event.RecordMeta{Stream: k.work, StreamSeq: seq, Subject: msg.Subject, PublishedAt: now.UTC(),
			Failure: event.Failure{Code: predict.ReasonPredictedFailure, Detail: detail, Agent: p.Agent, RecordedAt: now.UTC()}},
		Headers: msg.Header,
		Data:    msg.Data,
	}
	h, data, err := rec.Encode()
	if err != nil {
		return Published{}, fmt.Errorf("agentkit: record predicted failure: %w", err)
	}
	rm := &nats.Msg{Subject: event.RecordSubject(k.work), Header: h, Data: data}
	if limit := k.js.Conn().MaxPayload(); limit > 0 && int64(recordSize(rm)) > limit {
		return Published{}, fmt.Errorf("%w: %d bytes, limit %d", ErrRecordTooLarge, recordSize(rm), limit)
	}
	ack, err := k.js.PublishMsg(ctx, rm, jetstream.WithExpectStream(k.records))
	if err != nil {
		return Published{}, fmt.Errorf("agentkit: record predicted failure of %s on %s: %w (not published)", msg.Subject, k.records, err)
	}
	out.Ack, out.Subject, out.Routed = ack, rm.Subject, true
	return out, nil
}

// predictedSeq is the stream sequence a task routed to the DLQ is recorded
// under: it never ran, so it has none. It is at least 2^62, a sequence no
// stream reaches, so its event id never names a real message; derived from
// the task's tenant and idempotency key (the FNV-1a hash of
// IdempotencyDocID(tenant, key)), so publishing the same task twice records
// it once (the record stream deduplicates Nats-Msg-Id <stream>.<seq>) and
// two tenants' tasks with one key are two records; random for a task
// without a key.
func predictedSeq(tenant, key string) uint64 {
	var v uint64
	if key != "" {
		h := fnv.New64a()
		_, _ = h.Write([]byte(IdempotencyDocID(tenant, key)))
		v = h.Sum64()
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		v = binary.BigEndian.Uint64(b[:])
	}
	return 1<<62 | v&(1<<62-1)
}
