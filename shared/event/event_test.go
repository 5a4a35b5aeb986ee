package event_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jsdlq/jsdlq/internal/eventschema"
	"github.com/jsdlq/jsdlq/shared/event"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func boolp(b bool) *bool { return &b }

func maxDeliverEvent() event.Event {
	e := event.Event{
		Schema: event.Schema, ID: "TASKS.42", Kind: event.KindMaxDeliver,
		Stream: "TASKS", StreamSeq: 42, Consumer: "backend", Tenant: "acme", Agent: "backend",
		Advisory: &event.Advisory{
			Type: event.AdvisoryMaxDeliver, ID: "adv1", Timestamp: t0, Stream: "TASKS",
			Consumer: "backend", StreamSeq: 42, Deliveries: 3,
		},
		Failure: &event.Failure{
			Code: "llm_provider_timeout", Detail: "upstream 504", Attempt: 3, Agent: "backend",
			CompletedSteps: []string{"fetch"}, Retryable: boolp(true), RecordedAt: t0,
		},
		ObservedAt: t0.Add(time.Second),
	}
	pub := t0.Add(-time.Minute)
	e.Message.Subject = "agents.backend.tasks.code_review"
	e.Message.Headers = event.EncodeHeaders(map[string][]string{"X-Tenant-ID": {"acme"}, "X-Bin": {"\xff\xfe"}})
	e.Message.PublishedAt = &pub
	e.Message.SetPayload([]byte{0, 1, 2, 0xff})
	return e
}

func terminatedMissing() event.Event {
	return event.Event{
		Schema: event.Schema, ID: "WQ.7", Kind: event.KindTerminated, Stream: "WQ", StreamSeq: 7,
		Consumer: "c", Tenant: event.DefaultTenant,
		Advisory: &event.Advisory{
			Type: event.AdvisoryTerminated, ID: "adv2", Timestamp: t0, Stream: "WQ", Consumer: "c",
			ConsumerSeq: 9, StreamSeq: 7, Deliveries: 0, Reason: "Message deleted by stream limits",
		},
		Message:    event.Message{Missing: true, MissingReason: event.MissingNotFound},
		ObservedAt: t0,
	}
}

func explicitTruncated() event.Event {
	e := event.Event{
		Schema: event.Schema, ID: "TASKS.9", Kind: event.KindExplicit, Stream: "TASKS", StreamSeq: 9,
		Tenant: "default", Failure: &event.Failure{Code: "context_window_overflow", RecordedAt: t0},
		ObservedAt: t0,
	}
	e.Message.Subject = "agents.cto.tasks.architecture"
	e.Message.SetPayload([]byte(strings.Repeat("x", 100)))
	e.Message.Truncate()
	return e
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	v, err := eventschema.FromModule()
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]event.Event{
		"max_deliver": maxDeliverEvent(), "terminated missing": terminatedMissing(), "explicit truncated": explicitTruncated(),
	} {
		t.Run(name, func(t *testing.T) {
			roundTrip(t, v, e, event.Encode, event.Decode)
		})
	}
}

// roundTrip encodes v, requires the schema to accept the encoding and the
// decoding of it to equal v: what every contract of this package promises.
func roundTrip[T any](t *testing.T, schema interface{ Validate([]byte) error }, v T, encode func(T) ([]byte, error), decode func([]byte) (T, error)) {
	t.Helper()
	b, err := encode(v)
	if err != nil {
		t.Fatalf("Encode(%+v) = %v", v, err)
	}
	if err := schema.Validate(b); err != nil {
		t.Errorf("schema refuses the encoding %s: %v", b, err)
	}
	got, err := decode(b)
	if err != nil {
		t.Fatalf("Decode(%s) = %v", b, err)
	}
	if d := cmp.Diff(v, got); d != "" {
		t.Errorf("Decode(Encode(v)) differs (-want +got):\n%s", d)
	}
}

// mutate returns the JSON of maxDeliverEvent with fn applied to its generic form.
func mutate(t *testing.T, fn func(m map[string]any)) []byte {
	t.Helper()
	b, err := json.Marshal(maxDeliverEvent())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func msg(m map[string]any) map[string]any { return m["message"].(map[string]any) }

func TestDecodeRejects(t *testing.T) {
	v, err := eventschema.FromModule()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		doc  []byte
		want string
	}{
		{"not json", []byte("{"), "not a single JSON object"},
		{"array", []byte("[]"), "not a single JSON object"},
		{"no schema", mutate(t, func(m map[string]any) { delete(m, "schema") }), "schema is missing"},
		{"unknown schema", mutate(t, func(m map[string]any) { m["schema"] = "jsdlq.event.v2" }), `unknown schema "jsdlq.event.v2"`},
		{"missing id", mutate(t, func(m map[string]any) { delete(m, "id") }), "id is missing"},
		{"id mismatch", mutate(t, func(m map[string]any) { m["id"] = "TASKS.43" }), "does not match stream"},
		{"stream mismatch", mutate(t, func(m map[string]any) { m["stream"] = "OTHER"; m["id"] = "OTHER.42" }), "advisory is for TASKS.42"},
		{"seq as string", mutate(t, func(m map[string]any) { m["stream_seq"] = "42" }), "cannot unmarshal string"},
		{"negative seq", mutate(t, func(m map[string]any) { m["stream_seq"] = -1 }), "cannot unmarshal number -1"},
		{"unknown field", mutate(t, func(m map[string]any) { m["extra"] = 1 }), `unknown field "extra"`},
		{"unknown kind", mutate(t, func(m map[string]any) { m["kind"] = "nak" }), `kind "nak"`},
		{"advisory type mismatch", mutate(t, func(m map[string]any) { m["kind"] = "terminated" }), "does not match kind terminated"},
		{"explicit with advisory", mutate(t, func(m map[string]any) { m["kind"] = "explicit" }), "explicit event carries no advisory"},
		{"no tenant", mutate(t, func(m map[string]any) { delete(m, "tenant") }), "tenant is missing"},
		{"no observed_at", mutate(t, func(m map[string]any) { delete(m, "observed_at") }), "observed_at is missing"},
		{"bad time", mutate(t, func(m map[string]any) { m["observed_at"] = "yesterday" }), "cannot parse"},
		{"data mismatch", mutate(t, func(m map[string]any) { msg(m)["data"] = "AAAA" }), "sha256"},
		{"size mismatch", mutate(t, func(m map[string]any) { msg(m)["size"] = 5 }), "size 5 does not match the 4 bytes"},
		{"data not base64", mutate(t, func(m map[string]any) { msg(m)["data"] = "!!" }), "illegal base64"},
		{"missing with data", mutate(t, func(m map[string]any) { msg(m)["missing"] = true }), "missing message carries no data"},
		{"failure without code", mutate(t, func(m map[string]any) { delete(m["failure"].(map[string]any), "code") }), "failure.code is missing"},
		{"bad encoded header", mutate(t, func(m map[string]any) { msg(m)["headers"] = map[string]any{"X": []any{"jsdlq-b64:***"}} }), "malformed jsdlq-b64"},
		{"trailing data", append(mutate(t, func(map[string]any) {}), []byte(" {}")...), "after top-level value"},
	}
	// Cross-field invariants a JSON Schema cannot express; Decode checks them.
	codeOnly := map[string]bool{"id mismatch": true, "stream mismatch": true, "size mismatch": true,
		"data mismatch": true, "trailing data": true, "not json": true, "array": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := event.Decode(tt.doc)
			if !errors.Is(err, event.ErrInvalid) {
				t.Fatalf("Decode(%s) = %v, want an ErrInvalid", tt.name, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode(%s) = %q, want it to mention %q", tt.name, err, tt.want)
			}
			// The schema must refuse what Decode refuses (JSON-level checks only:
			// the digest check needs code).
			if !codeOnly[tt.name] {
				if v.Validate(tt.doc) == nil {
					t.Errorf("schema accepts %s, Decode refuses it", tt.name)
				}
			}
		})
	}
}

func TestIDAndParseID(t *testing.T) {
	if got := event.ID("TASKS", 18446744073709551615); got != "TASKS.18446744073709551615" {
		t.Errorf("ID = %q", got)
	}
	for _, tt := range []struct {
		id     string
		stream string
		seq    uint64
		ok     bool
	}{
		{"TASKS.1", "TASKS", 1, true},
		{"MY-STREAM_2.99", "MY-STREAM_2", 99, true},
		{"TASKS", "", 0, false},
		{".5", "", 0, false},
		{"TASKS.0", "", 0, false},
		{"TASKS.x", "", 0, false},
	} {
		s, q, err := event.ParseID(tt.id)
		if (err == nil) != tt.ok || s != tt.stream || q != tt.seq {
			t.Errorf("ParseID(%q) = %q, %d, %v; want %q, %d, ok=%v", tt.id, s, q, err, tt.stream, tt.seq, tt.ok)
		}
	}
}

func TestAttributes(t *testing.T) {
	got := maxDeliverEvent().Attributes()
	want := map[string]string{"kind": "max_deliver", "stream": "TASKS", "consumer": "backend",
		"tenant": "acme", "agent": "backend", "event_id": "TASKS.42"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Attributes (-want +got):\n%s", d)
	}
	got = explicitTruncated().Attributes()
	if _, ok := got["consumer"]; ok {
		t.Errorf("Attributes of an event without consumer = %v, want no empty consumer", got)
	}
}

func TestHeaderEncodingIsLossless(t *testing.T) {
	raw := map[string][]string{
		"Plain":           {"hello", "wörld"},
		"Binary":          {"\xff\x00\xfe", ""},
		"Looks-Encoded":   {"jsdlq-b64:aGk="},
		"Name-\xc3\x28":   {"v"},
		"jsdlq-b64:trick": {"x"},
	}
	enc := event.EncodeHeaders(raw)
	b, err := json.Marshal(enc)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string][]string
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	dec, err := event.DecodeHeaders(back)
	if err != nil {
		t.Fatalf("DecodeHeaders = %v", err)
	}
	if d := cmp.Diff(raw, dec); d != "" {
		t.Errorf("headers through JSON (-want +got):\n%s", d)
	}
	if enc["Plain"][1] != "wörld" {
		t.Errorf("valid UTF-8 was encoded: %q", enc["Plain"][1])
	}
	if got := enc["Binary"][0]; got != "jsdlq-b64:/wD+" {
		t.Errorf("EncodeHeader(binary) = %q, want jsdlq-b64:/wD+", got)
	}
}

func TestConventions(t *testing.T) {
	c := event.DefaultConventions
	tests := []struct {
		subject       string
		h             map[string][]string
		tenant, agent string
	}{
		{"agents.backend.tasks.review", nil, "default", "backend"},
		{"agents.backend.tasks.review", map[string][]string{"x-tenant-id": {"acme"}, "X-Agent": {"cto"}}, "acme", "cto"},
		{"orders.created", nil, "default", ""},
		{"agents.x.results", nil, "default", ""},
	}
	for _, tt := range tests {
		if got := c.Tenant(tt.h); got != tt.tenant {
			t.Errorf("Tenant(%v) = %q, want %q", tt.h, got, tt.tenant)
		}
		if got := c.Agent(tt.subject, tt.h); got != tt.agent {
			t.Errorf("Agent(%q, %v) = %q, want %q", tt.subject, tt.h, got, tt.agent)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	orig := map[string][]string{
		"Nats-Msg-Id":          {"task-1-v1"},
		"Nats-Expected-Stream": {"TASKS"},
		"Jsdlq-Record":         {"forged"},
		"Jsdlq-Orig-X":         {"nested"},
		"X-Tenant-ID":          {"acme"},
		"X-Bin":                {"\xff"},
	}
	r := event.Record{
		Meta: event.RecordMeta{Stream: "TASKS", StreamSeq: 5, Consumer: "cto", Subject: "agents.cto.tasks.debugging",
			PublishedAt: t0, Deliveries: 2, Failure: event.Failure{Code: "hallucination_loop", Attempt: 2, RecordedAt: t0}},
		Headers: orig,
		Data:    []byte{0xde, 0xad},
	}
	h, data, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got := h["Nats-Msg-Id"]; len(got) != 1 || got[0] != "TASKS.5" {
		t.Errorf("record Nats-Msg-Id = %v, want [TASKS.5]", got)
	}
	if _, ok := h["Nats-Expected-Stream"]; ok {
		t.Errorf("original Nats-Expected-Stream leaked into the record headers: %v", h)
	}
	// JetStream adds its own Nats- headers on the way back.
	h["Nats-Stream"] = []string{"DLQ_RECORDS"}
	back, err := event.ParseRecord(h, data)
	if err != nil {
		t.Fatalf("ParseRecord = %v", err)
	}
	r.Meta.Schema = event.RecordSchema
	if d := cmp.Diff(r, back); d != "" {
		t.Errorf("ParseRecord(Encode()) (-want +got):\n%s", d)
	}
	e := back.Event(event.DefaultConventions, t0)
	if e.ID != "TASKS.5" || e.Tenant != "acme" || e.Agent != "cto" || e.Kind != event.KindExplicit {
		t.Errorf("Record.Event = %+v", e)
	}
	if err := e.Validate(); err != nil {
		t.Errorf("Record.Event invalid: %v", err)
	}
}

func TestParseRecordRejects(t *testing.T) {
	for name, h := range map[string]map[string][]string{
		"no header":     {},
		"not json":      {"Jsdlq-Record": {"{"}},
		"wrong schema":  {"Jsdlq-Record": {`{"schema":"x","stream":"S","stream_seq":1,"subject":"a","failure":{"code":"c"}}`}},
		"no seq":        {"Jsdlq-Record": {`{"schema":"jsdlq.record.v1","stream":"S","subject":"a","failure":{"code":"c"}}`}},
		"dotted stream": {"Jsdlq-Record": {`{"schema":"jsdlq.record.v1","stream":"S.x","stream_seq":1,"subject":"a","failure":{"code":"c"}}`}},
		"no code":       {"Jsdlq-Record": {`{"schema":"jsdlq.record.v1","stream":"S","stream_seq":1,"subject":"a","failure":{}}`}},
		"no subject":    {"Jsdlq-Record": {`{"schema":"jsdlq.record.v1","stream":"S","stream_seq":1,"failure":{"code":"c"}}`}},
	} {
		if _, err := event.ParseRecord(h, nil); !errors.Is(err, event.ErrInvalid) {
			t.Errorf("ParseRecord(%s) = %v, want ErrInvalid", name, err)
		}
	}
}
