// Package kitcompat holds the tests that keep the two agentkits one
// contract: the TypeScript package's own tests (npm_test.go) and the
// cross-language comparison (this file): for the same deliveries the Go kit
// (shared/agentkit) and the TypeScript kit (clients/typescript, driven by
// its tools/compat.ts) write byte for byte the same DLQ records, failure
// bucket values and idempotency documents (under the same tenant-scoped
// ids), claims and claim renewals (the keep-alive's lease arithmetic), which
// conform to the JSON Schemas of docs/, decide alike which tasks run (two
// tenants' tasks with one key, records of older kits), and classify turns
// them into the same entries.
package kitcompat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/api/iterator"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
	"github.com/jsdlq/jsdlq/tools/tsagent"
)

// step is what the agent does with one delivery (tools/compat.ts reads the
// same JSON).
type step struct {
	// Do is terminate, fail, once (the delivery's task), keepalive (once,
	// with a keep-alive interval of keepAliveInterval, working until its
	// claim was renewed) or preflight.
	Do      string         `json:"do"`
	Failure *event.Failure `json:"failure,omitempty"`
	Prompt  string         `json:"prompt,omitempty"`
	Window  int            `json:"window,omitempty"`
}

// task is one message of the work stream and the step its delivery gets.
type task struct {
	headers map[string][]string
	data    []byte
	step    step
}

var (
	yes, no = true, false
	// The kits' clock: millisecond precision, which both can represent.
	clock = time.Date(2026, 11, 21, 12, 0, 0, 250_000_000, time.UTC)
)

// inputs exercise every field of the contract: escaped header names,
// multi-valued headers, binary and empty payloads, details that Go's JSON
// escapes, every optional failure field set and unset, the pre-flight's own
// failure, and once's task: two tenants with one key (each runs), a tenant
// trimmed to one that ran already (skipped), the default tenant, a tenant
// of several bytes a character (the id's length prefix counts bytes), no
// key (refused), and the records of older kits (olderRecords: one completed
// after the task's publish, honoured; one before, another task's).
var inputs = []task{
	{headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Task-ID": {"t1"}, "Nats-Msg-Id": {"task-1-v1"},
		"X-Multi": {"a", "b"}, "Jsdlq-Replay-Of": {"TASKS-9"}, "X-Unicode": {"café 日本 😀"}},
		data: []byte{0, 0xff, 'a', '\r', '\n'},
		step: step{Do: "terminate", Failure: &event.Failure{Code: "hallucination_loop",
			Detail: "loop <tool> & \"quotes\"\nat step 3\t\u2028 é 日 😀 \x01", CompletedSteps: []string{"draft", "step<2>"}, Retryable: &yes}}},
	{headers: map[string][]string{"X-Tenant-ID": {"beta"}, "Jsdlq-Orig-X": {"twice"}, "nats-lower": {"l"}, "Jsdlq-Record-Note": {"n"}},
		data: nil,
		step: step{Do: "terminate", Failure: &event.Failure{Code: "network_transient", Detail: "payments API reset",
			ToolFailure: true, CompletedSteps: []string{"charge-card"}, Retryable: &no}}},
	{data: []byte(`{"task":"no headers"}`), step: step{Do: "terminate", Failure: &event.Failure{Code: "impossible_task"}}},
	{headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Task-ID": {"t4"}},
		data: []byte("retry me"),
		step: step{Do: "fail", Failure: &event.Failure{Code: "llm_provider_timeout", Detail: "504 <gateway>", CompletedSteps: []string{"fetch"}}}},
	{data: []byte("x"), step: step{Do: "fail", Failure: &event.Failure{Code: "rate_limited", Retryable: &no, ToolFailure: true}}},
	{headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"task-6-v1"}}, data: []byte("once"), step: step{Do: "once"}},
	{headers: map[string][]string{"X-Tenant-ID": {"beta"}, "X-Idempotency-Key": {"task-6-v1"}}, data: []byte("once, another tenant"), step: step{Do: "once"}},
	{headers: map[string][]string{"x-tenant-id": {"acme\t"}, "X-Task-ID": {"task-6"}, "X-Task-Version": {"v1"}}, data: []byte("once again"), step: step{Do: "once"}},
	{headers: map[string][]string{"X-Task-ID": {"tenant/a/task-7"}}, data: []byte("once, default tenant"), step: step{Do: "once"}},
	{headers: map[string][]string{"X-Tenant-ID": {"ünï 日本"}, "X-Task-ID": {"t9"}, "X-Task-Version": {"2"}}, data: []byte("once, unicode tenant"), step: step{Do: "once"}},
	{headers: map[string][]string{"X-Tenant-ID": {"acme"}}, data: []byte("once without a key"), step: step{Do: "once"}},
	{headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"older/after"}}, data: []byte("once, older record after"), step: step{Do: "once"}},
	{headers: map[string][]string{"X-Tenant-ID": {"gamma"}, "X-Idempotency-Key": {"older-before"}}, data: []byte("once, older record before"), step: step{Do: "once"}},
	{headers: map[string][]string{"X-Tenant-ID": {"gamma"}, "X-Task-ID": {"t8"}}, data: []byte("big prompt"),
		step: step{Do: "preflight", Prompt: strings.Repeat("tokn", 9000) + "日本語", Window: 8000}},
	{headers: map[string][]string{"X-Tenant-ID": {"acme"}, "X-Idempotency-Key": {"long-1"}}, data: []byte("kept alive"), step: step{Do: "keepalive"}},
}

// keepAliveInterval is the keep-alive interval of the keepalive step; the
// other once steps take theirs from the consumer (half its first BackOff
// entry, which the server waits instead of AckWait).
const keepAliveInterval = 100 * time.Millisecond

// snapshotCollection is where a once step's fn copies the task's claim as
// it finds it when it starts ("<doc id>-claimed") and, in the keepalive
// step, once it has been renewed ("<doc id>-renewed"): the claims and the
// renewal are compared like the final records.
const snapshotCollection = "kitcompat-snapshots"

// record is a message of the record stream as stored.
type record struct {
	Subject string
	Headers map[string][]string
	Data    []byte
}

// capture is what one kit wrote.
type capture struct {
	Records  []record
	Failures map[string][]byte            // failure bucket key → value
	Docs     map[string]map[string]string // task-idempotency doc id → field → "<type> <value>"
	Claims   map[string]map[string]string // the claims and renewals once's fn saw (snapshotCollection)
	Entries  map[string]*store.Entry      // classify's entries of the records and failures
	Errors   []string                     // the kit's errors, per step ("" none)
	Ran      []string                     // per once step: ran, skipped or error ("" other steps)
}

// olderRecord is a completion record an agentkit from before tenant
// scoping wrote for key: under the key alone, no tenant. offset places its
// completion against the publish of the input that carries key.
type olderRecord struct {
	input  int // index in inputs
	key    string
	offset time.Duration
}

// olderRecords are written before each kit runs; neither kit may change them.
var olderRecords = []olderRecord{{11, "older/after", time.Second}, {12, "older-before", -time.Second}}

// wantRan is what once must do with each step, in both kits.
var wantRan = []string{"", "", "", "", "", "ran", "ran", "skipped", "ran", "ran", "error", "skipped", "ran", "", "ran"}

func TestKitsWriteTheSameBytes(t *testing.T) {
	t.Parallel()
	dir := prepare(t)
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ctx := testenv.Context(t)
	// Limits retention keeps a terminated task: both kits get the same
	// deliveries (same sequence, same timestamp) from a recreated consumer.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: event.DefaultWorkStream, Subjects: []string{"agents.>"},
		Retention: jetstream.LimitsPolicy}); err != nil {
		t.Fatal(err)
	}
	published := make([]time.Time, len(inputs))
	work, err := js.Stream(ctx, event.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range inputs {
		m := nats.NewMsg(fmt.Sprintf("agents.backend.tasks.t%d", i+1))
		for k, vs := range in.headers {
			m.Header[k] = vs
		}
		m.Data = in.data
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := work.GetMsg(ctx, ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		published[i] = stored.Time
	}
	older := map[string]agentkit.IdempotencyRecord{}
	for _, o := range olderRecords {
		if got := inputs[o.input].headers["X-Idempotency-Key"]; len(got) != 1 || got[0] != o.key {
			t.Fatalf("input %d carries key %q, want %q", o.input, got, o.key)
		}
		at := published[o.input].Add(o.offset).UTC().Truncate(time.Microsecond)
		older[agentkit.LegacyIdempotencyDocID(o.key)] = agentkit.IdempotencyRecord{Key: o.key, Status: agentkit.StatusCompleted, Agent: "old",
			CompletedAt: at, ExpireAt: at.Add(agentkit.DefaultIdempotencyTTL)}
	}
	schemas := loadSchemas(t)
	caps := map[string]*capture{}
	for _, kit := range []string{"go", "ts"} {
		t.Run(kit, func(t *testing.T) {
			fs, project := testenv.Firestore(t)
			reset(t, js)
			for id, rec := range older {
				if _, err := fs.Collection(agentkit.DefaultIdempotencyCollection).Doc(id).Set(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			var errs, ran []string
			if kit == "go" {
				errs, ran = runGo(t, js, fs)
			} else {
				errs, ran = runTS(t, dir, n.URL, project)
			}
			c := collect(t, js, fs, older)
			c.Errors, c.Ran = errs, ran
			if d := cmp.Diff(wantRan, ran); d != "" {
				t.Errorf("once outcomes per step (-want +got):\n%s", d)
			}
			checkSchemas(t, schemas, c)
			c.Entries = classifyAll(t, fs, c)
			caps[kit] = c
		})
	}
	goCap, tsCap := caps["go"], caps["ts"]
	if goCap == nil || tsCap == nil {
		t.Fatal("a kit's run failed")
	}
	// The run is not vacuous: every step left its trace.
	if len(goCap.Records) != 4 || len(goCap.Failures) != 2 || len(goCap.Docs) != 6 || len(goCap.Claims) != 7 || len(goCap.Entries) != 6 {
		t.Fatalf("Go kit wrote %d records, %d failures, %d documents, %d claims and renewals, %d entries; want 4, 2, 6, 7, 6",
			len(goCap.Records), len(goCap.Failures), len(goCap.Docs), len(goCap.Claims), len(goCap.Entries))
	}
	checkLeases(t, goCap)
	if d := differences(goCap, tsCap); len(d) > 0 {
		t.Errorf("the TypeScript kit differs from the Go kit:\n%s", strings.Join(d, "\n"))
	}
}

// reset gives a kit a fresh consumer (every task delivered again, delivery
// 1), an empty record stream (no deduplication window from the other kit)
// and an empty failure bucket.
func reset(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := testenv.Context(t)
	_ = js.DeleteConsumer(ctx, event.DefaultWorkStream, "backend")
	_ = js.DeleteStream(ctx, event.DefaultRecordStream)
	_ = js.DeleteKeyValue(ctx, event.DefaultFailureBucket)
	names := bridge.Names{AdvisoryStream: event.DefaultAdvisoryStream, RecordStream: event.DefaultRecordStream, FailureBucket: event.DefaultFailureBucket}
	if err := bridge.Ensure(ctx, js, names, obs.Discard()); err != nil {
		t.Fatal(err)
	}
	// A long backoff: a NAKed task does not come back during the run.
	if _, err := js.CreateOrUpdateConsumer(ctx, event.DefaultWorkStream, jetstream.ConsumerConfig{Durable: "backend",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5, AckWait: time.Minute, BackOff: consumerBackOff}); err != nil {
		t.Fatal(err)
	}
}

// consumerBackOff is the consumer's BackOff: its first entry is also every
// first delivery's ack deadline.
var consumerBackOff = []time.Duration{10 * time.Minute, 20 * time.Minute}

func steps() []step {
	out := make([]step, len(inputs))
	for i, in := range inputs {
		out[i] = in.step
	}
	return out
}

// runGo does the steps with the Go kit, as tools/compat.ts does with the
// TypeScript kit, and returns each step's error and once's outcomes.
func runGo(t *testing.T, js jetstream.JetStream, fs *firestore.Client) (errs, ran []string) {
	t.Helper()
	ctx := testenv.Context(t)
	opts := []agentkit.Option{agentkit.WithAgent("backend"), agentkit.WithFirestore(fs), agentkit.WithClock(func() time.Time { return clock })}
	kit := agentkit.New(js, opts...)
	kept := agentkit.New(js, append(opts, agentkit.WithKeepAlive(keepAliveInterval))...)
	cons, err := js.Consumer(ctx, event.DefaultWorkStream, "backend")
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps() {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("step %d: no delivery: %v", i+1, err)
		}
		outcome := ""
		switch s.Do {
		case "terminate":
			err = kit.Terminate(ctx, m, *s.Failure)
		case "fail":
			err = kit.Fail(ctx, m, *s.Failure)
		case "once", "keepalive":
			k, task := kit, agentkit.TaskOf(m)
			if s.Do == "keepalive" {
				k = kept
			}
			var did bool
			if did, err = k.Once(ctx, task, func(context.Context) error { return snapshot(ctx, fs, task.DocID(), s.Do == "keepalive") }); err == nil {
				err = m.Ack()
			}
			outcome = onceOutcome(did, err)
		case "preflight":
			var oe *agentkit.OverflowError
			if _, err = kit.Preflight(agentkit.Budget{MaxTokens: s.Window}, s.Prompt); errors.As(err, &oe) {
				err = kit.Terminate(ctx, m, oe.Failure())
			} else if err == nil {
				err = m.Ack()
			}
		}
		errs, ran = append(errs, errString(err)), append(ran, outcome)
	}
	return errs, ran
}

// snapshot is once's fn in both kits: it copies the task's claim to
// snapshotCollection as it finds it and, when renewed is set, waits until
// the claim has been renewed and copies it again (tools/compat.ts does the
// same).
func snapshot(ctx context.Context, fs *firestore.Client, id string, renewed bool) error {
	doc := fs.Collection(agentkit.DefaultIdempotencyCollection).Doc(id)
	snaps := fs.Collection(snapshotCollection)
	claim, err := doc.Get(ctx)
	if err != nil {
		return err
	}
	if _, err := snaps.Doc(id+"-claimed").Set(ctx, claim.Data()); err != nil {
		return err
	}
	for renewed {
		cur, err := doc.Get(ctx)
		if err != nil {
			return err
		}
		if _, ok := cur.Data()["renewed_at"]; ok {
			_, err := snaps.Doc(id+"-renewed").Set(ctx, cur.Data())
			return err
		}
		select {
		case <-time.After(keepAliveInterval / 4):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// checkLeases checks the lease arithmetic the kits agree on: a claim's
// lease is three keep-alive intervals, the interval half the delivery's
// ack deadline (the consumer's first BackOff entry) or the configured one,
// and a renewal moves the lease and the expiry on from the renewal.
func checkLeases(t *testing.T, c *capture) {
	t.Helper()
	at := func(v string) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(v, "timestamp "))
		if err != nil {
			t.Fatalf("%q is not a timestamp", v)
		}
		return ts
	}
	long := agentkit.IdempotencyDocID("acme", "long-1")
	for id, d := range c.Claims {
		interval := consumerBackOff[0] / 2
		if strings.HasPrefix(id, long) {
			interval = keepAliveInterval
		}
		from := at(d["claimed_at"])
		if strings.HasSuffix(id, "-renewed") {
			from = at(d["renewed_at"])
		}
		if got, want := at(d["lease_until"]).Sub(from), agentkit.LeaseIntervals*interval; got != want {
			t.Errorf("%s: lease %v, want %d intervals of %v", id, got, agentkit.LeaseIntervals, interval)
		}
		if got := at(d["expire_at"]).Sub(from); got != agentkit.DefaultIdempotencyTTL {
			t.Errorf("%s: expires %v after the claim or renewal, want %v", id, got, agentkit.DefaultIdempotencyTTL)
		}
	}
}

// runCompat runs node tools/compat.ts with run as its input and decodes
// what it prints into out.
func runCompat(t *testing.T, dir string, run, out any) {
	t.Helper()
	in, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testenv.Context(t), "node", filepath.Join(dir, tsagent.CompatScript))
	cmd.Env = append(os.Environ(), "FIRESTORE_EMULATOR_HOST="+testenv.FirestoreHost(t))
	cmd.Stdin = bytes.NewReader(in)
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", tsagent.CompatScript, err, stderr.Bytes())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("compat output %q: %v", stdout, err)
	}
}

func onceOutcome(ran bool, err error) string {
	switch {
	case err != nil:
		return "error"
	case ran:
		return "ran"
	}
	return "skipped"
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// runTS does the steps with the TypeScript kit (node tools/compat.ts).
func runTS(t *testing.T, dir, natsURL, project string) (errs, ran []string) {
	t.Helper()
	var res struct {
		Steps []struct {
			Error string `json:"error"`
			Ran   *bool  `json:"ran"` // once steps only
		} `json:"steps"`
	}
	runCompat(t, dir, map[string]any{"nats_url": natsURL, "project": project, "stream": event.DefaultWorkStream,
		"consumer": "backend", "agent": "backend", "now": clock.Format(time.RFC3339Nano), "steps": steps(),
		"keep_alive_ms": keepAliveInterval.Milliseconds(), "snapshots": snapshotCollection}, &res)
	for i, s := range res.Steps {
		outcome := ""
		if do := steps()[i].Do; do == "once" || do == "keepalive" {
			var e error
			if s.Error != "" {
				e = errors.New(s.Error)
			}
			outcome = onceOutcome(s.Ran != nil && *s.Ran, e)
		}
		errs, ran = append(errs, s.Error), append(ran, outcome)
	}
	return errs, ran
}

// collect reads what the kit wrote; older are the records of older kits
// the test wrote before, which must be as written.
func collect(t *testing.T, js jetstream.JetStream, fs *firestore.Client, older map[string]agentkit.IdempotencyRecord) *capture {
	t.Helper()
	ctx := testenv.Context(t)
	c := &capture{Failures: map[string][]byte{}, Docs: map[string]map[string]string{}, Claims: map[string]map[string]string{}}
	s, err := js.Stream(ctx, event.DefaultRecordStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("record %d: %v", seq, err)
		}
		c.Records = append(c.Records, record{Subject: m.Subject, Headers: m.Header, Data: m.Data})
	}
	kv, err := js.KeyValue(ctx, event.DefaultFailureBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		c.Failures[k] = e.Value()
	}
	it := fs.Collection(agentkit.DefaultIdempotencyCollection).Documents(ctx)
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := older[snap.Ref.ID]; ok {
			var got agentkit.IdempotencyRecord
			if err := snap.DataTo(&got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("the older kit's record %s changed (-written +now):\n%s", snap.Ref.ID, d)
			}
			continue
		}
		c.Docs[snap.Ref.ID] = renderDoc(snap.Data())
	}
	snaps, err := fs.Collection(snapshotCollection).Documents(ctx).GetAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, snap := range snaps {
		c.Claims[snap.Ref.ID] = renderDoc(snap.Data())
	}
	return c
}

var owner = regexp.MustCompile(`^string [0-9a-f]{16}$`)

// renderDoc writes each field as "<Firestore type> <value>", so that a
// type difference (an integer for a timestamp) is a difference. The owner
// is random per attempt: only its form is compared.
func renderDoc(d map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range d {
		var s string
		switch v := v.(type) {
		case time.Time:
			s = "timestamp " + v.UTC().Format(time.RFC3339Nano)
		case string:
			s = "string " + v
		default:
			s = fmt.Sprintf("%T %v", v, v)
		}
		if k == "owner" && owner.MatchString(s) {
			s = "string <16 hex digits>"
		}
		out[k] = s
	}
	return out
}

// differences lists every way b differs from a, naming the part.
func differences(a, b *capture) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if len(a.Records) != len(b.Records) {
		add("records: go %d, ts %d", len(a.Records), len(b.Records))
	}
	for i := range min(len(a.Records), len(b.Records)) {
		ra, rb := a.Records[i], b.Records[i]
		if ra.Subject != rb.Subject {
			add("record %d subject: go %q, ts %q", i+1, ra.Subject, rb.Subject)
		}
		if !bytes.Equal(ra.Data, rb.Data) {
			add("record %d payload: go %q, ts %q", i+1, ra.Data, rb.Data)
		}
		for _, name := range unionKeys(ra.Headers, rb.Headers) {
			va, vb := ra.Headers[name], rb.Headers[name]
			if slices.Equal(va, vb) {
				continue
			}
			if name == event.RecordHeader && len(va) == 1 && len(vb) == 1 {
				add("record %d header %s differs at byte %d:\n  go %s\n  ts %s", i+1, name, firstDiff(va[0], vb[0]), va[0], vb[0])
				continue
			}
			add("record %d header %s: go %q, ts %q", i+1, name, va, vb)
		}
	}
	for _, k := range unionKeys(a.Failures, b.Failures) {
		va, okA := a.Failures[k]
		vb, okB := b.Failures[k]
		if okA != okB || !bytes.Equal(va, vb) {
			add("failure bucket %s differs at byte %d:\n  go %s\n  ts %s", k, firstDiff(string(va), string(vb)), va, vb)
		}
	}
	for what, docs := range map[string][2]map[string]map[string]string{"idempotency document": {a.Docs, b.Docs},
		"claim as once's fn saw it": {a.Claims, b.Claims}} {
		for _, id := range unionKeys(docs[0], docs[1]) {
			da, db := docs[0][id], docs[1][id]
			if da == nil || db == nil {
				add("%s %s: go %v, ts %v", what, id, da, db)
				continue
			}
			for _, f := range unionKeys(da, db) {
				if da[f] != db[f] {
					add("%s %s field %s: go %q, ts %q", what, id, f, da[f], db[f])
				}
			}
		}
	}
	for i := range max(len(a.Ran), len(b.Ran)) {
		if ra, rb := at(a.Ran, i), at(b.Ran, i); ra != rb {
			add("step %d once: go %q, ts %q", i+1, ra, rb)
		}
	}
	if !slices.Equal(a.Errors, b.Errors) {
		for i := range max(len(a.Errors), len(b.Errors)) {
			ea, eb := at(a.Errors, i), at(b.Errors, i)
			if (ea == "") != (eb == "") {
				add("step %d outcome: go error %q, ts error %q", i+1, ea, eb)
			}
		}
	}
	if d := cmp.Diff(a.Entries, b.Entries, entryOpts); d != "" {
		add("classify's entries (-go +ts):\n%s", d)
	}
	return out
}

// entryOpts leave out what classify stamps from its own clock, the
// random jitter of the replay delay and the store's own bookkeeping of
// the documents it read.
var entryOpts = cmp.Options{
	cmpopts.IgnoreUnexported(store.Entry{}),
	cmpopts.IgnoreFields(store.Entry{}, "CreatedAt", "UpdatedAt", "ExpireAt", "NextRetryAt", "ResolvedAt"),
	cmpopts.IgnoreFields(store.Transition{}, "At"),
	cmpopts.IgnoreFields(store.Plan{}, "DelaySeconds"),
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

func firstDiff(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func unionKeys[V any](a, b map[string]V) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// fixedPolicy is the default triage policy.
type fixedPolicy struct{ p *triage.Policy }

func (f fixedPolicy) Current(context.Context) *triage.Policy { return f.p }

// scheduled records the replay tasks classify asks for (the Cloud Tasks
// part is not what this test compares).
type scheduled struct {
	mu   sync.Mutex
	reqs []tasks.Request
}

func (s *scheduled) Schedule(_ context.Context, r tasks.Request) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
	return fmt.Sprintf("%s-r%d", r.EntryID, r.Attempt), true, nil
}

// classifyAll hands classify, as the bridge would, the explicit event of
// every record and the max deliveries event carrying every failure bucket
// value, and returns the entries it wrote.
func classifyAll(t *testing.T, fs *firestore.Client, c *capture) map[string]*store.Entry {
	t.Helper()
	ctx := testenv.Context(t)
	log, _ := testenv.Logger()
	st := store.New(fs)
	h := classify.New(classify.Config{}, classify.Deps{Logger: log, Store: st, Policy: fixedPolicy{triage.Default()},
		Scheduler: &scheduled{}, Now: func() time.Time { return clock }})
	var events []event.Event
	for i, r := range c.Records {
		rec, err := event.ParseRecord(r.Headers, r.Data)
		if err != nil {
			t.Fatalf("record %d: ParseRecord = %v", i+1, err)
		}
		events = append(events, rec.Event(event.DefaultConventions, clock))
	}
	for key, val := range c.Failures {
		stream, seq, err := event.ParseID(key)
		if err != nil {
			t.Fatalf("failure bucket key %q: %v", key, err)
		}
		var f event.Failure
		if err := json.Unmarshal(val, &f); err != nil {
			t.Fatalf("failure bucket %s: %v", key, err)
		}
		e := event.Event{Schema: event.Schema, ID: key, Kind: event.KindMaxDeliver, Stream: stream, StreamSeq: seq,
			Consumer: "backend", Tenant: event.DefaultTenant, Agent: f.Agent, Failure: &f, ObservedAt: clock,
			Advisory: &event.Advisory{Type: event.AdvisoryMaxDeliver, ID: "adv-" + key, Timestamp: clock, Stream: stream,
				Consumer: "backend", StreamSeq: seq, Deliveries: 5}}
		e.Message.Subject = "agents.backend.tasks.retried"
		e.Message.SetPayload([]byte("retried"))
		events = append(events, e)
	}
	out := map[string]*store.Entry{}
	for _, e := range events {
		body, err := event.Encode(e)
		if err != nil {
			t.Fatalf("Encode(%s) = %v", e.ID, err)
		}
		ce, err := testenv.PubSubEvent("msg-"+e.ID, body, e.Attributes())
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Handle(ctx, ce); err != nil {
			t.Fatalf("classify Handle(%s) = %v", e.ID, err)
		}
		id, _ := store.EntryID(e.ID)
		en, err := st.GetMeta(ctx, id)
		if err != nil {
			t.Fatalf("GetMeta(%s) = %v", id, err)
		}
		out[id] = en
	}
	return out
}
