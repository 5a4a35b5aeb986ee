package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
)

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

// fromAdvisories builds the events of a batch of advisories: the originals
// are read per stream in batches, and the failure records in one batch,
// both at once. A malformed advisory rejects only its own message.
func (b *Bridge) fromAdvisories(ctx context.Context, msgs []jetstream.Msg) []built {
	out := make([]built, len(msgs))
	bySeq := map[string][]uint64{}
	var keys []string
	for i, msg := range msgs {
		adv, kind, err := parseAdvisory(msg.Data())
		if err != nil {
			out[i].err = err
			continue
		}
		out[i].ev = event.Event{
			Schema:     event.Schema,
			ID:         event.ID(adv.Stream, adv.StreamSeq),
			Kind:       kind,
			Stream:     adv.Stream,
			StreamSeq:  adv.StreamSeq,
			Consumer:   adv.Consumer,
			Advisory:   &adv,
			ObservedAt: b.cfg.Now().UTC(),
		}
		bySeq[adv.Stream] = append(bySeq[adv.Stream], adv.StreamSeq)
		keys = append(keys, out[i].ev.ID)
	}
	if len(keys) == 0 {
		return out
	}
	var fails map[string]*event.Failure
	var failed map[string]error
	var wg sync.WaitGroup
	wg.Go(func() { fails, failed = b.failures.failures(ctx, keys) })
	origs := make(map[string]map[uint64]original, len(bySeq))
	var mu sync.Mutex
	for stream, seqs := range bySeq {
		wg.Go(func() {
			got := b.sources.getMany(ctx, stream, seqs)
			mu.Lock()
			origs[stream] = got
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range out {
		if out[i].err != nil {
			continue
		}
		ev := &out[i].ev
		o := origs[ev.Stream][ev.StreamSeq]
		if o.err != nil {
			out[i].err = retry("fetch", o.err)
			continue
		}
		var headers map[string][]string
		if o.missing != "" {
			ev.Message.SetMissing(o.missing)
			if o.missing == event.MissingPermissionDenied {
				b.log.Error("the bridge may not read this stream: forwarding the event without the message; grant $JS.API.DIRECT.GET and $JS.API.STREAM.MSG.GET / INFO on it",
					"stream", event.Wire(ev.Stream), "event_id", event.Wire(ev.ID))
			}
		} else {
			headers = o.msg.Header
			ev.Message.Subject = o.msg.Subject
			ev.Message.Headers = event.EncodeHeaders(headers)
			t := o.msg.Time.UTC()
			ev.Message.PublishedAt = &t
			ev.Message.SetPayload(o.msg.Data)
		}
		if err := failed[ev.ID]; err != nil {
			out[i].err = retry("kv", err)
			continue
		}
		ev.Failure = fails[ev.ID]
		failureAgent := ""
		if ev.Failure != nil {
			failureAgent = ev.Failure.Agent
		}
		// Names that break the naming rule go to the reserved tenant: as
		// read, they could be no Pub/Sub attribute (over 1,024 bytes, not
		// UTF-8) and the publish would be retried for ever. The headers
		// carry the originals to classify.
		names := event.DefaultConventions.Names(ev.Message.Subject, headers, failureAgent)
		ev.Tenant, ev.Agent = names.Tenant, names.Agent
		b.warnReserved(*ev)
	}
	return out
}

// warnReserved logs an event forwarded under the reserved tenant: a name
// its task carried breaks the naming rule (classify flags the entry).
func (b *Bridge) warnReserved(ev event.Event) {
	if ev.Tenant == event.ReservedTenant {
		b.log.Warn("a dead task's names break the naming rule: forwarded under the reserved tenant, the names kept in its headers",
			"event_id", event.Wire(ev.ID), "tenant", ev.Tenant)
	}
}
