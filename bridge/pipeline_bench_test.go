package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
)

// rawPipeline is the bridge's work per advisory written bare, the way one
// would with the libraries at hand, in the test process, with none of the
// bridge's own code (validation, metrics, missing/permission handling, NAK
// backoff, logging, fallbacks): pull advisories, take what has arrived as
// a batch (at most window messages in flight, like the bridge's
// MaxInFlight, and batches of half of it), then per batch, at once: one
// batch direct get of the originals' sequence range and one multi-subject
// direct get of their failure records in the KV bucket (absent here, as in
// the benchmark), both answered through one shared reply subscription;
// encode the events, hand them all to the publisher, and ack each advisory
// when Pub/Sub confirmed its event.
//
// It runs on the same embedded nats-server and Pub/Sub emulator as the
// bridge and needs the same NATS and Pub/Sub work per event, so the two
// share the machine's cores the same way: the ratio bridge / pipeline
// compares like with like, where the ratio to a bare publish loop measures
// the bridge against a loop that leaves nats-server idle.
func rawPipeline(ctx context.Context, tb testing.TB, js jetstream.JetStream, pub *pubsub.Publisher, durable string, n, window int) time.Duration {
	tb.Helper()
	cons, err := js.CreateOrUpdateConsumer(ctx, "DLQ_ADVISORIES", jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 2 * window})
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	it, err := cons.Messages(jetstream.PullMaxMessages(window))
	if err != nil {
		tb.Fatal(err)
	}
	defer it.Stop()
	pulled := make(chan jetstream.Msg, window)
	go func() {
		for range n {
			msg, err := it.Next()
			if err != nil {
				close(pulled)
				return
			}
			pulled <- msg
		}
	}()
	gets := newRawGets(tb, js.Conn())
	slots := make(chan struct{}, window)
	var wg sync.WaitGroup
	fail := make(firstErr, 1)
	for taken := 0; taken < n; {
		slots <- struct{}{}
		batch := []jetstream.Msg{<-pulled}
	fill:
		for len(batch) < window/2 && taken+len(batch) < n {
			select {
			case slots <- struct{}{}:
			default:
				break fill
			}
			select {
			case m := <-pulled:
				batch = append(batch, m)
			default:
				<-slots
				break fill
			}
		}
		taken += len(batch)
		wg.Go(func() {
			acked, err := rawBatch(ctx, gets, slots, pub, batch)
			for range len(batch) - acked {
				<-slots
			}
			if err != nil {
				fail.set(err)
			}
		})
	}
	fail.wait(tb, &wg)
	return time.Since(start)
}

// firstErr keeps the first error the pipeline's goroutines report: the
// others are most likely its consequences.
type firstErr chan error

func (f firstErr) set(err error) {
	select {
	case f <- err:
	default:
	}
}

// wait waits for the goroutines and fails tb with the first error, if any.
func (f firstErr) wait(tb testing.TB, wg *sync.WaitGroup) {
	wg.Wait()
	select {
	case err := <-f:
		tb.Fatal(fmt.Errorf("raw pipeline: %w", err))
	default:
	}
}

// rawGets sends batch direct gets and routes their answers through one
// wildcard subscription, as the bridge does (a subscription per request
// costs a SUB, an UNSUB and a 64 Ki-slot channel each time).
type rawGets struct {
	nc      *nats.Conn
	inbox   string
	mu      sync.Mutex
	n       int
	waiting map[string]chan *nats.Msg
}

func newRawGets(tb testing.TB, nc *nats.Conn) *rawGets {
	g := &rawGets{nc: nc, inbox: nc.NewInbox(), waiting: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(g.inbox+".*", func(m *nats.Msg) {
		g.mu.Lock()
		ch := g.waiting[m.Subject]
		g.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	return g
}

// get sends req to stream's direct get API and returns the messages of
// the answer up to its end marker (204) or "no results" (404).
func (g *rawGets) get(ctx context.Context, stream string, req any, expect int) ([]*nats.Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ch := make(chan *nats.Msg, expect+1)
	g.mu.Lock()
	g.n++
	reply := fmt.Sprintf("%s.%d", g.inbox, g.n)
	g.waiting[reply] = ch
	g.mu.Unlock()
	defer func() { g.mu.Lock(); delete(g.waiting, reply); g.mu.Unlock() }()
	if err := g.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, reply, body); err != nil {
		return nil, err
	}
	var out []*nats.Msg
	for {
		select {
		case m := <-ch:
			switch m.Header.Get("Status") {
			case "204", "404":
				return out, nil
			case "":
				out = append(out, m)
			default:
				return nil, fmt.Errorf("direct get %s: %s %s", stream, m.Header.Get("Status"), m.Header.Get("Description"))
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// rawBatch forwards one batch of advisories of one stream (the benchmark's).
// Each ack frees its slot at once; it returns how many it acked.
func rawBatch(ctx context.Context, gets *rawGets, slots chan struct{}, pub *pubsub.Publisher, batch []jetstream.Msg) (int, error) {
	advs := make([]event.Advisory, len(batch))
	subjects := make([]string, len(batch))
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for i, msg := range batch {
		if err := json.Unmarshal(msg.Data(), &advs[i]); err != nil {
			return 0, err
		}
		lo, hi = min(lo, advs[i].StreamSeq), max(hi, advs[i].StreamSeq)
		subjects[i] = "$KV.dlq_failures." + event.ID(advs[i].Stream, advs[i].StreamSeq)
	}
	var origs, failures []*nats.Msg
	var getErr, kvErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		origs, getErr = gets.get(ctx, advs[0].Stream, map[string]any{"seq": lo, "batch": hi - lo + 1}, int(hi-lo+1))
	})
	wg.Go(func() {
		failures, kvErr = gets.get(ctx, "KV_dlq_failures", map[string]any{"multi_last": subjects}, len(subjects))
	})
	wg.Wait()
	if err := errors.Join(getErr, kvErr); err != nil {
		return 0, err
	}
	if len(failures) > 0 {
		return 0, fmt.Errorf("the benchmark has no failure records, got %d", len(failures))
	}
	bySeq := make(map[uint64]*nats.Msg, len(origs))
	for _, m := range origs {
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return 0, err
		}
		bySeq[seq] = m
	}
	results := make([]*pubsub.PublishResult, len(batch))
	for i := range batch {
		adv := &advs[i]
		orig, ok := bySeq[adv.StreamSeq]
		if !ok {
			return 0, fmt.Errorf("original %d not read", adv.StreamSeq)
		}
		published, err := time.Parse(time.RFC3339Nano, orig.Header.Get(jetstream.TimeStampHeaer))
		if err != nil {
			return 0, err
		}
		ev := event.Event{Schema: event.Schema, ID: event.ID(adv.Stream, adv.StreamSeq), Kind: event.KindMaxDeliver,
			Stream: adv.Stream, StreamSeq: adv.StreamSeq, Consumer: adv.Consumer, Tenant: "default", Agent: "backend",
			ObservedAt: time.Now().UTC(), Advisory: adv}
		ev.Message.Subject = orig.Header.Get(jetstream.SubjectHeader)
		ev.Message.PublishedAt = &published
		ev.Message.SetPayload(orig.Data)
		data, err := event.Encode(ev)
		if err != nil {
			return 0, err
		}
		results[i] = pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: map[string]string{
			"kind": string(ev.Kind), "stream": ev.Stream, "event_id": ev.ID}})
	}
	for i, r := range results {
		if _, err := r.Get(ctx); err != nil {
			return i, err
		}
		if err := batch[i].Ack(); err != nil {
			return i, err
		}
		<-slots
	}
	return len(batch), nil
}

// rawPipelinePerEvent is the same work one request per event, the way the
// bridge worked before it read in batches: each advisory in its own
// goroutine (at most window at once) direct-gets its original, gets its
// failure record from the KV bucket, publishes and acks. It shows what the
// batches gain on the same run.
func rawPipelinePerEvent(ctx context.Context, tb testing.TB, js jetstream.JetStream, pub *pubsub.Publisher, n, window int) time.Duration {
	tb.Helper()
	cons, err := js.CreateOrUpdateConsumer(ctx, "DLQ_ADVISORIES", jetstream.ConsumerConfig{
		Durable: "raw-per-event", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 2 * window})
	if err != nil {
		tb.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "dlq_failures")
	if err != nil {
		tb.Fatal(err)
	}
	streams := sync.Map{}
	stream := func(name string) (jetstream.Stream, error) {
		if s, ok := streams.Load(name); ok {
			return s.(jetstream.Stream), nil
		}
		s, err := js.Stream(ctx, name)
		if err == nil {
			streams.Store(name, s)
		}
		return s, err
	}
	start := time.Now()
	it, err := cons.Messages(jetstream.PullMaxMessages(window))
	if err != nil {
		tb.Fatal(err)
	}
	defer it.Stop()
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	fail := make(firstErr, 1)
	for range n {
		msg, err := it.Next()
		if err != nil {
			tb.Fatal(err)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var adv event.Advisory
			if err := json.Unmarshal(msg.Data(), &adv); err != nil {
				fail.set(err)
				return
			}
			st, err := stream(adv.Stream)
			if err != nil {
				fail.set(err)
				return
			}
			orig, err := st.GetMsg(ctx, adv.StreamSeq)
			if err != nil {
				fail.set(err)
				return
			}
			if _, err := kv.Get(ctx, event.ID(adv.Stream, adv.StreamSeq)); err != nil && err != jetstream.ErrKeyNotFound {
				fail.set(err)
				return
			}
			ev := event.Event{Schema: event.Schema, ID: event.ID(adv.Stream, adv.StreamSeq), Kind: event.KindMaxDeliver,
				Stream: adv.Stream, StreamSeq: adv.StreamSeq, Consumer: adv.Consumer, Tenant: "default", Agent: "backend",
				ObservedAt: time.Now().UTC(), Advisory: &adv}
			ev.Message.Subject = orig.Subject
			ev.Message.PublishedAt = &orig.Time
			ev.Message.SetPayload(orig.Data)
			data, err := event.Encode(ev)
			if err != nil {
				fail.set(err)
				return
			}
			if _, err := pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: map[string]string{
				"kind": string(ev.Kind), "stream": ev.Stream, "event_id": ev.ID}}).Get(ctx); err != nil {
				fail.set(err)
				return
			}
			if err := msg.Ack(); err != nil {
				fail.set(err)
			}
		}()
	}
	fail.wait(tb, &wg)
	return time.Since(start)
}
