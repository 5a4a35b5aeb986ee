package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
