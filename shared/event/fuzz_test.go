package event_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/jsdlq/jsdlq/internal/eventschema"
	"github.com/jsdlq/jsdlq/shared/event"
)

// FuzzDecode feeds arbitrary bytes to the decoder classify runs on every
// Pub/Sub message. Properties: a refusal wraps ErrInvalid (classify relies on
// that to acknowledge instead of retrying forever); an accepted event
// validates, re-encodes, decodes to the same value, and satisfies the
// published JSON schema (so the Go checks are never looser than the contract).
func FuzzDecode(f *testing.F) {
	for _, e := range []event.Event{maxDeliverEvent(), terminatedMissing(), explicitTruncated()} {
		b, err := event.Encode(e)
		if err != nil {
			f.Fatalf("Encode(seed %s) = %v", e.ID, err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"schema":"jsdlq.event.v2","id":"A.1"}`))
	f.Add([]byte(`{"schema":"jsdlq.event.v1","id":"A.1","stream":"A","stream_seq":"1"}`))
	f.Add([]byte(`null`))
	schema, err := eventschema.FromModule()
	if err != nil {
		f.Fatalf("eventschema.FromModule() = %v", err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := event.Decode(data)
		if err != nil {
			if !errors.Is(err, event.ErrInvalid) {
				t.Fatalf("Decode(%q) error %v does not wrap ErrInvalid", data, err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Decode(%q) accepted an event that Validate refuses: %v", data, err)
		}
		// The schema is checked on the accepted input itself: a decoder
		// looser than the schema would let producers drift.
		if err := schema.Validate(data); err != nil {
			t.Fatalf("Decode accepted %q, the schema refuses it: %v", data, err)
		}
		b, err := event.Encode(e)
		if err != nil {
			t.Fatalf("Encode(Decode(%q)) = %v", data, err)
		}
		again, err := event.Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(%q))) = %v", data, err)
		}
		if diff := cmp.Diff(e, again); diff != "" {
			t.Fatalf("event changed by a round trip (-first +second):\n%s", diff)
		}
		if _, err := event.DecodeHeaders(e.Message.Headers); err != nil {
			t.Fatalf("accepted event %s has headers DecodeHeaders refuses: %v", e.ID, err)
		}
	})
}

// FuzzHeaders checks that any NATS header bytes survive the event's header
// encoding exactly and that the encoded form is valid UTF-8 (JSON would
// otherwise mangle it), and that DecodeHeader never accepts what it cannot
// reverse.
func FuzzHeaders(f *testing.F) {
	f.Add("X-Tenant-ID", "acme")
	f.Add("X-Bin", "\xff\xfe")
	f.Add(event.EncodedPrefix+"x", event.EncodedPrefix+"!!")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, name, value string) {
		h := map[string][]string{name: {value, value + "2"}}
		enc := event.EncodeHeaders(h)
		for n, vs := range enc {
			if !utf8.ValidString(n) {
				t.Fatalf("EncodeHeaders name %q is not UTF-8", n)
			}
			for _, v := range vs {
				if !utf8.ValidString(v) {
					t.Fatalf("EncodeHeaders value %q is not UTF-8", v)
				}
			}
		}
		dec, err := event.DecodeHeaders(enc)
		if err != nil {
			t.Fatalf("DecodeHeaders(EncodeHeaders(%q)) = %v", h, err)
		}
		if diff := cmp.Diff(h, dec); diff != "" {
			t.Fatalf("headers changed by a round trip (-want +got):\n%s", diff)
		}
		// Arbitrary text as an encoded value: either refused, or decoded to
		// something that encodes back to a value that decodes the same.
		if got, err := event.DecodeHeader(value); err == nil {
			back, err := event.DecodeHeader(event.EncodeHeader(got))
			if err != nil || back != got {
				t.Fatalf("DecodeHeader(EncodeHeader(%q)) = %q, %v; want %q", got, back, err, got)
			}
		}
	})
}

// FuzzParseRecord feeds arbitrary metadata headers and payloads to the
// explicit-record parser the bridge runs on DLQ_RECORDS messages, and checks
// that Encode and ParseRecord are inverse: the original headers (including
// ones named Nats-* or Jsdlq-*) and payload come back byte for byte.
func FuzzParseRecord(f *testing.F) {
	good := `{"schema":"jsdlq.record.v1","stream":"TASKS","stream_seq":3,"subject":"agents.a.tasks.t","published_at":"2026-11-21T12:00:00Z","failure":{"code":"timeout","recorded_at":"2026-11-21T12:00:00Z"}}`
	f.Add(good, "Nats-Msg-Id", "TASKS.3", []byte("payload"))
	f.Add(`{"schema":"jsdlq.record.v2"}`, "X-Tenant-ID", "acme", []byte{})
	f.Add(`{"schema":"jsdlq.record.v1","stream":"A.B","stream_seq":1,"subject":"s","failure":{"code":"x"}}`, "Jsdlq-Orig-X", "v", []byte{0xff})
	f.Add(`[]`, "Jsdlq-Record", "{}", []byte(nil))
	f.Fuzz(func(t *testing.T, meta, name, value string, data []byte) {
		headers := map[string][]string{event.RecordHeader: {meta}}
		if name != "" && !strings.EqualFold(name, event.RecordHeader) {
			headers[name] = []string{value}
		}
		r, err := event.ParseRecord(headers, data)
		if err != nil {
			if !errors.Is(err, event.ErrInvalid) {
				t.Fatalf("ParseRecord error %v does not wrap ErrInvalid", err)
			}
		} else {
			ev := r.Event(event.DefaultConventions, r.Meta.PublishedAt)
			if ev.ID != event.ID(r.Meta.Stream, r.Meta.StreamSeq) || ev.Kind != event.KindExplicit {
				t.Fatalf("Record.Event = id %q kind %q, want %q explicit", ev.ID, ev.Kind, event.ID(r.Meta.Stream, r.Meta.StreamSeq))
			}
		}

		// Round trip with the fuzzed header as an original header.
		orig := map[string][]string{}
		if name != "" {
			orig[name] = []string{value}
		}
		rec := event.Record{
			Meta: event.RecordMeta{
				Stream: "TASKS", StreamSeq: 7, Subject: "agents.a.tasks.t",
				Failure: event.Failure{Code: "timeout", Detail: value},
			},
			Headers: orig,
			Data:    data,
		}
		h, body, err := rec.Encode()
		if err != nil {
			t.Fatalf("Record.Encode() = %v", err)
		}
		back, err := event.ParseRecord(h, body)
		if err != nil {
			t.Fatalf("ParseRecord(Encode()) = %v", err)
		}
		want := orig
		if len(want) == 0 {
			want = nil
		}
		if diff := cmp.Diff(want, back.Headers); diff != "" {
			t.Fatalf("record headers changed by a round trip (-want +got):\n%s", diff)
		}
		if string(back.Data) != string(data) {
			t.Fatalf("record payload changed by a round trip: %q, want %q", back.Data, data)
		}
		// The failure detail is text inside JSON metadata: bytes that are
		// not UTF-8 become U+FFFD (a lossy but harmless change of a
		// human-readable note); valid text must come back unchanged.
		if utf8.ValidString(value) && back.Meta.Failure.Detail != value {
			t.Fatalf("record detail changed by a round trip: %q, want %q", back.Meta.Failure.Detail, value)
		}
	})
}

// FuzzParseID checks that ParseID inverts ID and refuses with ErrInvalid.
func FuzzParseID(f *testing.F) {
	f.Add("TASKS.42")
	f.Add("TASKS.0")
	f.Add(".1")
	f.Add("A.B.18446744073709551615")
	f.Fuzz(func(t *testing.T, id string) {
		stream, seq, err := event.ParseID(id)
		if err != nil {
			if !errors.Is(err, event.ErrInvalid) {
				t.Fatalf("ParseID(%q) error %v does not wrap ErrInvalid", id, err)
			}
			return
		}
		if seq == 0 || stream == "" {
			t.Fatalf("ParseID(%q) = %q, %d; want a stream and a positive sequence", id, stream, seq)
		}
		// Leading zeros are accepted (an operator typing TASKS.007 means
		// TASKS.7); every other accepted id is canonical.
		if got := event.ID(stream, seq); got != id && !strings.HasPrefix(id[len(stream)+1:], "0") {
			t.Fatalf("ID(ParseID(%q)) = %q", id, got)
		}
	})
}
