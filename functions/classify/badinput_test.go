package classify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jsdlq/jsdlq/internal/testenv"
	jevent "github.com/jsdlq/jsdlq/shared/event"
)

// Wrong JSON types in every part of an event: acknowledged (nil, so Pub/Sub
// does not redeliver forever), one WARNING naming the reason, no entry.
func TestWrongTypesAreAcknowledgedWithAReason(t *testing.T) {
	e := setup(t)
	body, _ := jevent.Encode(advisory(1, jevent.KindMaxDeliver, "", msg{payload: []byte("p")}))
	mutate := func(path, value string) []byte {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		keys := strings.Split(path, ".")
		cur := m
		for _, k := range keys[:len(keys)-1] {
			cur = cur[k].(map[string]any)
		}
		var v any
		if err := json.Unmarshal([]byte(value), &v); err != nil {
			t.Fatal(err)
		}
		cur[keys[len(keys)-1]] = v
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct{ path, value string }{
		{"stream_seq", `"1"`},
		{"stream_seq", `-1`},
		{"stream_seq", `1.5`},
		{"kind", `7`},
		{"tenant", `["acme"]`},
		{"observed_at", `"yesterday"`},
		{"advisory.deliveries", `"3"`},
		{"message.headers", `{"X-Tenant-ID":"acme"}`},
		{"message.headers", `{"X":[1]}`},
		{"message.data", `"not base64!"`},
		{"message.size", `"1"`},
		{"message.missing", `"false"`},
		{"schema", `null`},
	}
	for i, c := range cases {
		ce := pubsubEvent(t, fmt.Sprint("wrong-", i), mutate(c.path, c.value))
		before := len(e.logs.Lines("malformed"))
		if err := e.h.Handle(testenv.Context(t), ce); err != nil {
			t.Errorf("%s = %s: Handle() = %v, want nil (acknowledged)", c.path, c.value, err)
		}
		if got := len(e.logs.Lines("malformed")) - before; got != 1 {
			t.Errorf("%s = %s: %d malformed log lines, want 1", c.path, c.value, got)
		}
	}
	if n := e.entries(t); n != 0 {
		t.Errorf("wrong-typed events left %d entries, want 0", n)
	}
}

// Large and odd input that is valid must be kept whole: a 6 MiB payload
// (near the largest a 10 MB Pub/Sub message carries after base64), 512 headers
// of 1 KiB with names and values that are not UTF-8, and an event for a
// stream nobody configured. Nothing is truncated or lost; the payload is
// chunked and reads back byte for byte.
func TestLargeAndOddInputIsKeptWhole(t *testing.T) {
	e := setup(t)
	payload := bytes.Repeat([]byte{0xff, 0x00, 'x', 0x80}, 3<<19)
	headers := map[string][]string{"X-Tenant-ID": {"acme"}}
	for i := range 512 {
		headers[fmt.Sprintf("X-H-%d-\xff", i)] = []string{strings.Repeat("v", 1000) + "\xfe\xff"}
	}
	big := explicit(11, "timeout", "", msg{payload: payload, headers: headers, keyless: true})
	odd := explicit(12, "timeout", "", msg{subject: "nobody.listens.here", payload: []byte("x")})
	odd.ID, odd.Stream = jevent.ID("NO_SUCH_STREAM", 12), "NO_SUCH_STREAM"
	for _, ev := range []jevent.Event{big, odd} {
		b, err := jevent.Encode(ev)
		if err != nil {
			t.Fatalf("Encode(%s) = %v", ev.ID, err)
		}
		if ev.ID == big.ID && (len(b) < 7_500_000 || len(b) > 9_500_000) {
			t.Fatalf("the big event is %d bytes; the test means the largest the bridge forwards whole (9.5 MB)", len(b))
		}
		e.handle(t, pubsubEvent(t, "msg-"+ev.ID, b))
	}
	got := e.entry(t, big.ID)
	if !bytes.Equal(got.Payload, payload) {
		t.Fatalf("payload of %s: %d bytes back, want %d identical bytes", big.ID, len(got.Payload), len(payload))
	}
	dec, err := jevent.DecodeHeaders(got.Headers)
	if err != nil {
		t.Fatalf("DecodeHeaders(stored) = %v", err)
	}
	if diff := cmp.Diff(headers, dec); diff != "" {
		t.Fatalf("stored headers differ (-want +got):\n%s", diff)
	}
	if o := e.entry(t, odd.ID); o.Stream != "NO_SUCH_STREAM" || o.Status == "" {
		t.Fatalf("entry of an unknown stream = %+v, want it recorded", o)
	}
}

// A message whose headers take most of a document (700 values of 1 000
// bytes that are not UTF-8: ~930 KB stored) and whose payload is under the
// inline bound: the payload goes to its chunks instead, so the entry fits
// Firestore's 1 MiB. It was refused for good and retried until Pub/Sub
// dead-lettered it, without ever becoming an entry.
func TestHeavyHeadersMoveThePayloadOut(t *testing.T) {
	e := setup(t)
	headers := map[string][]string{"X-Tenant-ID": {"acme"}}
	for i := range 700 {
		headers[fmt.Sprintf("X-H-%d", i)] = []string{strings.Repeat("\xff", 1000)}
	}
	payload := bytes.Repeat([]byte("p"), 200<<10)
	ev := explicit(80, "timeout", "", msg{payload: payload, headers: headers, keyless: true})
	if err := e.h.Handle(testenv.Context(t), cloudEvent(t, ev)); err != nil {
		t.Fatalf("Handle(an event whose entry would exceed 1 MiB inline) = %v, want it recorded", err)
	}
	got := e.entry(t, ev.ID)
	if !bytes.Equal(got.Payload, payload) || got.PayloadChunkCount == 0 {
		t.Errorf("payload = %d bytes in %d chunks, want the %d bytes, in chunks", len(got.Payload), got.PayloadChunkCount, len(payload))
	}
	if dec, err := jevent.DecodeHeaders(got.Headers); err != nil || len(dec) != len(headers) {
		t.Errorf("headers = %d, %v, want all %d", len(dec), err, len(headers))
	}
}
