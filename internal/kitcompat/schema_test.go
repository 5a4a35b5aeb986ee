package kitcompat

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// The contract's JSON Schemas (docs/), by file name.
const (
	failureSchema     = "failure.schema.json"
	recordSchema      = "record.schema.json"
	idempotencySchema = "idempotency.schema.json"
)

const schemaBase = "https://github.com/jsdlq/jsdlq/docs/"

func loadSchemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	names := []string{failureSchema, recordSchema, idempotencySchema}
	for _, name := range names {
		f, err := os.Open(filepath.Join(testenv.ModuleRoot(t), "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("parse docs/%s: %v", name, err)
		}
		if err := c.AddResource(schemaBase+name, doc); err != nil {
			t.Fatalf("add docs/%s: %v", name, err)
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, name := range names {
		s, err := c.Compile(schemaBase + name)
		if err != nil {
			t.Fatalf("compile docs/%s: %v", name, err)
		}
		out[name] = s
	}
	return out
}

func validate(s *jsonschema.Schema, doc []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// docJSON turns a rendered idempotency document back into JSON, its
// timestamps as RFC 3339 strings, the form the schema describes.
func docJSON(t *testing.T, d map[string]string) []byte {
	t.Helper()
	m := map[string]any{}
	for k, v := range d {
		typ, val, _ := strings.Cut(v, " ")
		switch typ {
		case "string", "timestamp":
			m[k] = val
		default:
			m[k] = v // not a string or a timestamp: the schema refuses it
		}
		if k == "owner" && val == "<16 hex digits>" {
			m[k] = "0123456789abcdef"
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSchemas validates what a kit wrote against the schemas of docs/.
func checkSchemas(t *testing.T, schemas map[string]*jsonschema.Schema, c *capture) {
	t.Helper()
	for i, r := range c.Records {
		meta := event.Header(r.Headers, event.RecordHeader)
		if err := validate(schemas[recordSchema], []byte(meta)); err != nil {
			t.Errorf("record %d: %s does not conform to docs/%s: %v", i+1, meta, recordSchema, err)
		}
		// The headers docs/contracts.md promises next to the metadata.
		rec, err := event.ParseRecord(r.Headers, r.Data)
		if err != nil {
			t.Errorf("record %d: ParseRecord = %v", i+1, err)
			continue
		}
		want := map[string]string{"Nats-Msg-Id": event.ID(rec.Meta.Stream, rec.Meta.StreamSeq),
			"Nats-Expected-Stream": event.DefaultRecordStream}
		for name, v := range want {
			if got := r.Headers[name]; len(got) != 1 || got[0] != v {
				t.Errorf("record %d: header %s = %q, want %q", i+1, name, got, v)
			}
		}
		if r.Subject != event.RecordSubject(rec.Meta.Stream) {
			t.Errorf("record %d: subject %q, want %q", i+1, r.Subject, event.RecordSubject(rec.Meta.Stream))
		}
	}
	for k, v := range c.Failures {
		if err := validate(schemas[failureSchema], v); err != nil {
			t.Errorf("failure bucket %s: %s does not conform to docs/%s: %v", k, v, failureSchema, err)
		}
	}
	for id, d := range c.Docs {
		if err := validate(schemas[idempotencySchema], docJSON(t, d)); err != nil {
			t.Errorf("idempotency document %s: %v does not conform to docs/%s: %v", id, d, idempotencySchema, err)
		}
	}
	for id, d := range c.Claims {
		if err := validate(schemas[idempotencySchema], docJSON(t, d)); err != nil {
			t.Errorf("claim %s: %v does not conform to docs/%s: %v", id, d, idempotencySchema, err)
		}
	}
}

// The schemas refuse what a kit must not write (so a passing validation
// says something).
func TestSchemasRefuseWhatKitsMustNotWrite(t *testing.T) {
	t.Parallel()
	schemas := loadSchemas(t)
	tests := []struct {
		schema, doc string
		ok          bool
	}{
		{failureSchema, `{"code":"x","recorded_at":"2026-11-21T12:00:00.25Z"}`, true},
		{failureSchema, `{"code":"x","recorded_at":"2026-11-21T12:00:00.250Z"}`, false}, // Go drops trailing zeros
		{failureSchema, `{"code":"x","tool_failure":false,"recorded_at":"2026-11-21T12:00:00Z"}`, false},
		{failureSchema, `{"code":"","recorded_at":"2026-11-21T12:00:00Z"}`, false},
		{failureSchema, `{"code":"x","attempt":0,"recorded_at":"2026-11-21T12:00:00Z"}`, false},
		{failureSchema, `{"code":"x","completedSteps":["a"],"recorded_at":"2026-11-21T12:00:00Z"}`, false},
		{recordSchema, `{"schema":"jsdlq.record.v1","stream":"TASKS","stream_seq":3,"subject":"s","published_at":"2026-11-21T12:00:00Z","failure":{"code":"x","recorded_at":"2026-11-21T12:00:00Z"}}`, true},
		{recordSchema, `{"schema":"jsdlq.record.v1","stream":"TA.SKS","stream_seq":3,"subject":"s","published_at":"2026-11-21T12:00:00Z","failure":{"code":"x","recorded_at":"2026-11-21T12:00:00Z"}}`, false},
		{recordSchema, `{"schema":"jsdlq.record.v1","stream":"TASKS","stream_seq":3,"subject":"s","published_at":"2026-11-21T12:00:00Z","failure":{"code":"x"}}`, false},
		{idempotencySchema, `{"key":"k","tenant":"acme","status":"completed","owner":"0123456789abcdef","completed_at":"2026-11-21T12:00:00Z","expire_at":"2026-11-24T12:00:00Z"}`, true},
		{idempotencySchema, `{"key":"k","status":"completed","owner":"0123456789abcdef","completed_at":"2026-11-21T12:00:00Z","expire_at":"2026-11-24T12:00:00Z"}`, false}, // an older kit's, no tenant
		{idempotencySchema, `{"key":"k","tenant":"","status":"completed","completed_at":"2026-11-21T12:00:00Z","expire_at":"2026-11-24T12:00:00Z"}`, false},
		{idempotencySchema, `{"key":"k","tenant":"acme","status":"completed","expire_at":"2026-11-24T12:00:00Z"}`, false},
		{idempotencySchema, `{"key":"k","tenant":"acme","status":"in_progress","claimed_at":"2026-11-21T12:00:00Z","expire_at":"2026-11-24T12:00:00Z"}`, false},
		{idempotencySchema, `{"key":"k","tenant":"acme","status":"in_progress","owner":"0123456789abcdef","claimed_at":"2026-11-21T12:00:00Z","lease_until":"2026-11-21T12:00:03Z","renewed_at":"2026-11-21T12:00:01Z","expire_at":"2026-11-24T12:00:01Z"}`, true},
		{idempotencySchema, `{"key":"k","tenant":"acme","status":"completed","owner":"0123456789abcdef","renewed_at":"2026-11-21T12:00:01Z","completed_at":"2026-11-21T12:00:02Z","expire_at":"2026-11-24T12:00:02Z"}`, false},
	}
	for _, tt := range tests {
		err := validate(schemas[tt.schema], []byte(tt.doc))
		if (err == nil) != tt.ok {
			t.Errorf("validate(%s, %s) = %v, want ok %v", tt.schema, tt.doc, err, tt.ok)
		}
	}
}

// baseDoc is the id of the base capture's idempotency document.
var baseDoc = agentkit.IdempotencyDocID("acme", "task-3-v1")

// baseCapture is what a kit writes for one terminated, one failed and one
// once task, built with the Go contract types.
func baseCapture(t *testing.T) *capture {
	t.Helper()
	f := event.Failure{Code: "hallucination_loop", Detail: "loop <x>", Attempt: 1, Agent: "backend", CompletedSteps: []string{"draft"},
		Retryable: &no, RecordedAt: clock}
	h, data, err := event.Record{Meta: event.RecordMeta{Stream: "TASKS", StreamSeq: 1, Consumer: "backend", Subject: "agents.backend.tasks.t1",
		PublishedAt: clock, Deliveries: 1, Failure: f}, Headers: map[string][]string{"Nats-Msg-Id": {"task-1"}, "X-Tenant-ID": {"acme"}},
		Data: []byte("payload")}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return &capture{
		Records:  []record{{Subject: "dlq.records.TASKS", Headers: h, Data: data}},
		Failures: map[string][]byte{"TASKS.2": kv},
		Docs: map[string]map[string]string{baseDoc: {"key": "string task-3-v1", "tenant": "string acme", "status": "string completed",
			"agent": "string backend", "owner": "string <16 hex digits>", "completed_at": "timestamp 2026-11-21T12:00:00.25Z",
			"expire_at": "timestamp 2026-11-24T12:00:00.25Z"}},
		Claims: map[string]map[string]string{baseDoc + "-renewed": {"key": "string task-3-v1", "tenant": "string acme",
			"status": "string in_progress", "agent": "string backend", "owner": "string <16 hex digits>",
			"claimed_at": "timestamp 2026-11-21T12:00:00.25Z", "lease_until": "timestamp 2026-11-21T12:00:00.55Z",
			"renewed_at": "timestamp 2026-11-21T12:00:00.25Z", "expire_at": "timestamp 2026-11-24T12:00:00.25Z"}},
		Entries: map[string]*store.Entry{"TASKS-1": {ID: "TASKS-1", Category: "conditionally_recoverable", Status: store.Scheduled}},
		Errors:  []string{"", "", ""},
		Ran:     []string{"", "", "ran"},
	}
}

func cloneCapture(t *testing.T, c *capture) *capture {
	t.Helper()
	out := &capture{Failures: map[string][]byte{}, Docs: map[string]map[string]string{}, Claims: map[string]map[string]string{},
		Entries: map[string]*store.Entry{},
		Errors:  append([]string(nil), c.Errors...), Ran: append([]string(nil), c.Ran...)}
	for _, r := range c.Records {
		h := map[string][]string{}
		for k, v := range r.Headers {
			h[k] = append([]string(nil), v...)
		}
		out.Records = append(out.Records, record{Subject: r.Subject, Headers: h, Data: bytes.Clone(r.Data)})
	}
	for k, v := range c.Failures {
		out.Failures[k] = bytes.Clone(v)
	}
	for id, d := range c.Docs {
		out.Docs[id] = maps.Clone(d)
	}
	for id, d := range c.Claims {
		out.Claims[id] = maps.Clone(d)
	}
	for id, e := range c.Entries {
		cp := *e
		out.Entries[id] = &cp
	}
	return out
}

// The comparison reports a change of any one field on one side, naming
// it: a kit that drifts from the contract fails the cross-language test.
func TestDifferencesReportOneChangedField(t *testing.T) {
	t.Parallel()
	meta := func(c *capture) string { return c.Records[0].Headers[event.RecordHeader][0] }
	setMeta := func(c *capture, s string) { c.Records[0].Headers[event.RecordHeader] = []string{s} }
	tests := []struct {
		name   string
		mutate func(c *capture)
		want   string
	}{
		{"record field order", func(c *capture) {
			setMeta(c, strings.Replace(meta(c), `"stream":"TASKS","stream_seq":1`, `"stream_seq":1,"stream":"TASKS"`, 1))
		}, "record 1 header Jsdlq-Record differs at byte"},
		{"record time with a trailing zero", func(c *capture) {
			setMeta(c, strings.Replace(meta(c), `12:00:00.25Z"`, `12:00:00.250Z"`, 1))
		}, "header Jsdlq-Record differs"},
		{"record detail not HTML-escaped", func(c *capture) {
			setMeta(c, strings.Replace(meta(c), `\u003cx\u003e`, `<x>`, 1))
		}, "header Jsdlq-Record differs"},
		{"original Nats-Msg-Id not escaped", func(c *capture) {
			h := c.Records[0].Headers
			h["Nats-Msg-Id-Orig"] = h["Jsdlq-Orig-Nats-Msg-Id"]
			delete(h, "Jsdlq-Orig-Nats-Msg-Id")
		}, "header Jsdlq-Orig-Nats-Msg-Id"},
		{"record Nats-Msg-Id", func(c *capture) { c.Records[0].Headers["Nats-Msg-Id"] = []string{"TASKS-1"} }, "header Nats-Msg-Id"},
		{"record payload", func(c *capture) { c.Records[0].Data[0] ^= 1 }, "record 1 payload"},
		{"record subject", func(c *capture) { c.Records[0].Subject = "dlq.records.tasks" }, "record 1 subject"},
		{"a record missing", func(c *capture) { c.Records = nil }, "records: go 1, ts 0"},
		{"failure value: retryable false left out", func(c *capture) {
			c.Failures["TASKS.2"] = bytes.Replace(c.Failures["TASKS.2"], []byte(`,"retryable":false`), nil, 1)
		}, "failure bucket TASKS.2 differs at byte"},
		{"failure value: attempt as a string", func(c *capture) {
			c.Failures["TASKS.2"] = bytes.Replace(c.Failures["TASKS.2"], []byte(`"attempt":1`), []byte(`"attempt":"1"`), 1)
		}, "failure bucket TASKS.2"},
		{"failure under another key", func(c *capture) {
			c.Failures["TASKS-2"] = c.Failures["TASKS.2"]
			delete(c.Failures, "TASKS.2")
		}, "failure bucket TASKS-2"},
		{"idempotency expire_at as a number", func(c *capture) {
			c.Docs[baseDoc]["expire_at"] = "int64 1795521600"
		}, "idempotency document " + baseDoc + " field expire_at"},
		{"idempotency agent left out", func(c *capture) { delete(c.Docs[baseDoc], "agent") }, "field agent"},
		{"idempotency tenant left out", func(c *capture) { delete(c.Docs[baseDoc], "tenant") }, "field tenant"},
		{"idempotency tenant untrimmed", func(c *capture) { c.Docs[baseDoc]["tenant"] = "string acme " }, "field tenant"},
		{"idempotency ttl 24 h", func(c *capture) {
			c.Docs[baseDoc]["expire_at"] = "timestamp " + clock.Add(24*time.Hour).Format(time.RFC3339Nano)
		}, "field expire_at"},
		{"idempotency document id not scoped by tenant", func(c *capture) {
			c.Docs["task-3-v1"] = c.Docs[baseDoc]
			delete(c.Docs, baseDoc)
		}, "idempotency document " + baseDoc},
		{"idempotency document id of another tenant", func(c *capture) {
			c.Docs[agentkit.IdempotencyDocID("default", "task-3-v1")] = c.Docs[baseDoc]
			delete(c.Docs, baseDoc)
		}, "idempotency document " + baseDoc},
		{"renewal's lease not three intervals", func(c *capture) {
			c.Claims[baseDoc+"-renewed"]["lease_until"] = "timestamp 2026-11-21T12:00:00.45Z"
		}, "claim as once's fn saw it " + baseDoc + "-renewed field lease_until"},
		{"renewal without renewed_at", func(c *capture) { delete(c.Claims[baseDoc+"-renewed"], "renewed_at") }, "field renewed_at"},
		{"renewal's expiry not moved on", func(c *capture) {
			c.Claims[baseDoc+"-renewed"]["expire_at"] = "timestamp 2026-11-24T12:00:00Z"
		}, "field expire_at"},
		{"once ran where the other kit skipped", func(c *capture) { c.Ran[2] = "skipped" }, "step 3 once"},
		{"classified differently", func(c *capture) { c.Entries["TASKS-1"].Category = "permanent" }, "classify's entries"},
		{"a step failed", func(c *capture) { c.Errors[1] = "agentkit: boom" }, "step 2 outcome"},
	}
	base := baseCapture(t)
	if d := differences(base, cloneCapture(t, base)); len(d) != 0 {
		t.Fatalf("differences(capture, its copy) = %v, want none", d)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := cloneCapture(t, base)
			tt.mutate(ts)
			d := differences(base, ts)
			if len(d) == 0 {
				t.Fatalf("differences after %s = none, want one naming %q", tt.name, tt.want)
			}
			if !strings.Contains(strings.Join(d, "\n"), tt.want) {
				t.Errorf("differences after %s = %q, want one naming %q", tt.name, d, tt.want)
			}
		})
	}
}
