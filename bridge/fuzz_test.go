package bridge

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
)

// FuzzParseAdvisory feeds arbitrary bytes to the advisory parser. Properties:
// a refusal is a rejected errInput (the bridge acks and counts it; anything else
// would be NAKed and redelivered forever, since the consumer's MaxDeliver is
// unlimited); an accepted advisory names a stream that JetStream can be asked
// for (a name the client refuses would fail the fetch on every redelivery)
// and yields an event that encodes and decodes unchanged.
func FuzzParseAdvisory(f *testing.F) {
	f.Add([]byte(`{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"a","timestamp":"2026-11-21T12:00:00Z","stream":"TASKS","consumer":"w","stream_seq":7,"deliveries":3}`))
	f.Add([]byte(`{"type":"io.nats.jetstream.advisory.v1.terminated","id":"a","timestamp":"2026-11-21T12:00:00Z","stream":"TASKS","consumer":"w","consumer_seq":9,"stream_seq":7,"deliveries":1,"reason":"timeout: x"}`))
	f.Add([]byte(`{"type":"io.nats.jetstream.advisory.v1.max_deliver","timestamp":"2026-11-21T12:00:00Z","stream":"A/B","stream_seq":1}`))
	f.Add([]byte(`{"type":"io.nats.jetstream.advisory.v1.nak","stream":"TASKS","stream_seq":7}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		adv, kind, err := parseAdvisory(data)
		if err != nil {
			var in *errInput
			if !errors.As(err, &in) || !in.rejected {
				t.Fatalf("parseAdvisory(%q) = %v, want a rejected errInput (acked, counted)", data, err)
			}
			if in.reason != "malformed_advisory" && in.reason != "unknown_advisory" {
				t.Fatalf("parseAdvisory(%q) rejected with reason %q", data, in.reason)
			}
			return
		}
		if !kind.Valid() || kind == event.KindExplicit {
			t.Fatalf("parseAdvisory(%q) kind = %q", data, kind)
		}
		if adv.Stream == "" || strings.ContainsAny(adv.Stream, ">*. /\\\t\r\n") || adv.StreamSeq == 0 {
			t.Fatalf("parseAdvisory(%q) accepted stream %q seq %d, which JetStream cannot be asked for", data, adv.Stream, adv.StreamSeq)
		}
		ev := event.Event{
			Schema: event.Schema, ID: event.ID(adv.Stream, adv.StreamSeq), Kind: kind,
			Stream: adv.Stream, StreamSeq: adv.StreamSeq, Consumer: adv.Consumer, Tenant: event.DefaultTenant,
			Advisory: &adv, ObservedAt: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC),
		}
		ev.Message.SetMissing(event.MissingNotFound)
		b, err := event.Encode(ev)
		if err != nil {
			t.Fatalf("event of accepted advisory %q does not encode: %v", data, err)
		}
		back, err := event.Decode(b)
		if err != nil {
			t.Fatalf("event of accepted advisory %q does not decode: %v", data, err)
		}
		if back.Advisory == nil || back.Advisory.Reason != adv.Reason || back.ID != ev.ID {
			t.Fatalf("advisory changed by the event round trip: %+v, want %+v", back.Advisory, adv)
		}
	})
}
