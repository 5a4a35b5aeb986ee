package kitcompat

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/store"
)

// publishInput is one task a publisher publishes (tools/compat.ts reads the
// same JSON).
type publishInput struct {
	Subject string              `json:"subject"`
	Payload []byte              `json:"payload"`
	Headers map[string][]string `json:"headers"`
}

// published is what a kit's publish answered for one task.
type published struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Subject   string `json:"subject"`
	Predicted bool   `json:"predicted"`
	Routed    bool   `json:"routed"`
	Error     string `json:"error,omitempty"`
}

// publishModel predicts, for the inputs below: big refactors overflow
// (compress them: a strategy), blog posts loop (route them to the DLQ),
// reviews time out (advisory, with figures Go and JavaScript round
// differently by default: 0.125 and 0.375 are ties at two decimals), SEO
// tasks loop (hand them to the editor), and translations by an agent whose
// name needs escaping in a cell key overflow when estimated large.
func publishModel() predict.Model {
	row := func(agent, typ, feature, bucket, reason, action string, p, c float64, r event.Replay, alt string) predict.Prediction {
		return predict.Prediction{Key: predict.Key{Agent: agent, TaskType: typ, Feature: feature, Bucket: bucket}, Tasks: 80, Deaths: 10,
			Probability: p, Confidence: c, Reason: reason, ReasonShare: 1, Action: action, Strategy: r.Strategy, Replay: r, AlternateAgent: alt}
	}
	compress := event.Replay{Strategy: "context_window_overflow", MaxContextTokens: 80000, TargetModel: "large-context",
		Instructions: []string{"Focus on\nthe core task.", "Cite sources."}}
	return predict.Model{TrainedAt: clock, MinSupport: 20, Threshold: 0.5, Predictions: []predict.Prediction{
		row("coder", "refactor", predict.FeatureSize, "64-256KiB", "context_window_overflow", predict.ActionStrategy, 0.9, 0.83, compress, ""),
		row("writer", "blog", predict.FeatureAll, predict.BucketAll, "hallucination_loop", predict.ActionDLQ, 0.875, 0.625, event.Replay{}, ""),
		row("coder", "review", predict.FeatureAll, predict.BucketAll, "timeout", "", 0.125, 0.375, event.Replay{}, ""),
		row("writer", "seo", predict.FeatureAll, predict.BucketAll, "hallucination_loop", predict.ActionStrategy, 0.7, 0.6,
			event.Replay{Strategy: "hallucination_loop", TargetModel: "alternate"}, "editor"),
		row("équipe/1", "translate", predict.FeatureTokens, "8k-32k", "context_window_overflow", "", 0.51, 0.5, event.Replay{}, ""),
	}}
}

// publishInputs exercise every branch of the pre-flight and the message id:
// counted, advisory, strategy, strategy to another agent, routed to the
// DLQ (two tenants with one key, and a retry), a retry of a published task
// and another tenant's task with its key, no key, forged jsdlq headers with the publisher's own message id, and a
// token estimate of an agent whose name is escaped in its cells.
var publishInputs = []publishInput{
	{"agents.coder.tasks.fix", []byte("small"), map[string][]string{"X-Task-ID": {"p1"}, "X-Tenant-ID": {"acme"}}},
	{"agents.coder.tasks.review", []byte("r"), map[string][]string{"X-Idempotency-Key": {"p2"}}},
	{"agents.coder.tasks.refactor", bytes.Repeat([]byte("x"), 100<<10), map[string][]string{"X-Task-ID": {"p3"}, "X-Task-Version": {"2"}}},
	{"agents.writer.tasks.seo", []byte("s"), map[string][]string{"X-Agent": {"writer"}, "X-Task-ID": {"p4"}, "X-Tenant-ID": {"beta"}}},
	{"agents.writer.tasks.blog", []byte(`{"topic":"jsdlq"}`), map[string][]string{"X-Task-ID": {"post-1"}, "X-Tenant-ID": {"acme"}}},
	{"agents.writer.tasks.blog", []byte(`{"topic":"jsdlq"}`), map[string][]string{"X-Task-ID": {"post-1"}, "X-Tenant-ID": {"beta"}}},
	{"agents.writer.tasks.blog", []byte(`{"topic":"jsdlq"}`), map[string][]string{"X-Task-ID": {"post-1"}, "X-Tenant-ID": {"acme"}}},
	{"agents.coder.tasks.fix", []byte("small"), map[string][]string{"X-Task-ID": {"p1"}, "X-Tenant-ID": {"acme"}}},
	{"agents.coder.tasks.fix", []byte("small"), map[string][]string{"X-Task-ID": {"p1"}, "X-Tenant-ID": {"beta"}}},
	{"agents.coder.tasks.fix", []byte("no key"), map[string][]string{"X-Tenant-ID": {"acme"}}},
	{"agents.coder.tasks.fix", []byte("forged"), map[string][]string{"X-Task-ID": {"p10"}, "Nats-Msg-Id": {"own-id"},
		"Jsdlq-Strategy": {"forged"}, "jsdlq-counted": {"0"}}},
	{"agents.translator.tasks.translate", []byte("t"), map[string][]string{"X-Agent": {"équipe/1"}, "X-Task-ID": {"p11"},
		"X-Estimated-Tokens": {" 9000 "}}},
}

// publishCapture is what one kit's publishes left.
type publishCapture struct {
	Results []published
	Tasks   []record                     // the work stream's messages
	Records []record                     // the record stream's messages
	Counts  map[string]map[string]string // dlq-predict-counts doc id → field → rendered value
}

// Both kits' publish, with the same model and clock, publish the same
// messages with the same Nats-Msg-Id, route the same tasks to the DLQ with
// the same records, and count the same cells.
func TestKitsPublishAlike(t *testing.T) {
	dir := prepare(t)
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	caps := map[string]*publishCapture{}
	for _, kit := range []string{"go", "ts"} {
		t.Run(kit, func(t *testing.T) {
			ctx := testenv.Context(t)
			fs, project := testenv.Firestore(t)
			_ = js.DeleteStream(ctx, event.DefaultWorkStream)
			_ = js.DeleteStream(ctx, event.DefaultRecordStream)
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: event.DefaultWorkStream, Subjects: []string{"agents.>"},
				Duplicates: time.Hour}); err != nil {
				t.Fatal(err)
			}
			names := bridge.Names{AdvisoryStream: event.DefaultAdvisoryStream, RecordStream: event.DefaultRecordStream, FailureBucket: event.DefaultFailureBucket}
			if err := bridge.Ensure(ctx, js, names, obs.Discard()); err != nil {
				t.Fatal(err)
			}
			if _, err := store.New(fs).SavePredictionModel(ctx, publishModel()); err != nil {
				t.Fatal(err)
			}
			var res []published
			if kit == "go" {
				res = publishGo(t, js, fs)
			} else {
				res = publishTS(t, dir, n.URL, project)
			}
			caps[kit] = collectPublished(t, js, fs, res)
		})
	}
	goCap, tsCap := caps["go"], caps["ts"]
	if goCap == nil || tsCap == nil {
		t.Fatal("a kit's run failed")
	}
	// Not vacuous: 12 publishes, of which a retry of a task and of a routed
	// task were duplicates, three routed (two records and a duplicate),
	// the rest in the work stream; counts for the two agents counted.
	if len(goCap.Tasks) != 8 || len(goCap.Records) != 2 || len(goCap.Counts) != 2 || len(goCap.Results) != len(publishInputs) {
		t.Fatalf("Go kit: %d tasks, %d records, %d counts documents, %d results; want 8, 2, 2, %d\n%+v",
			len(goCap.Tasks), len(goCap.Records), len(goCap.Counts), len(goCap.Results), len(publishInputs), goCap.Results)
	}
	if d := cmp.Diff(goCap, tsCap); d != "" {
		t.Errorf("the TypeScript kit's publish differs from the Go kit's (-go +ts):\n%s", d)
	}
}

func publishGo(t *testing.T, js jetstream.JetStream, fs *firestore.Client) []published {
	t.Helper()
	ctx := testenv.Context(t)
	kit := agentkit.New(js, agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour), agentkit.WithClock(func() time.Time { return clock }))
	if err := kit.RefreshPredictions(ctx); err != nil {
		t.Fatal(err)
	}
	var out []published
	for _, in := range publishInputs {
		p, err := kit.Publish(ctx, in.Subject, in.Payload, in.Headers)
		r := published{Subject: p.Subject, Predicted: p.Predicted, Routed: p.Routed, Error: errString(err)}
		if p.Ack != nil {
			r.Stream, r.Seq, r.Duplicate = p.Ack.Stream, p.Ack.Sequence, p.Ack.Duplicate
		}
		out = append(out, r)
	}
	if err := kit.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

func publishTS(t *testing.T, dir, natsURL, project string) []published {
	t.Helper()
	var res struct {
		Published []published `json:"published"`
	}
	runCompat(t, dir, map[string]any{"mode": "publish", "nats_url": natsURL, "project": project, "now": clock.Format(time.RFC3339Nano),
		"publishes": publishInputs}, &res)
	return res.Published
}

// collectPublished reads the streams and the counts a kit's publishes left.
func collectPublished(t *testing.T, js jetstream.JetStream, fs *firestore.Client, res []published) *publishCapture {
	t.Helper()
	ctx := testenv.Context(t)
	c := &publishCapture{Results: res, Counts: map[string]map[string]string{}}
	for _, s := range []struct {
		name string
		into *[]record
	}{{event.DefaultWorkStream, &c.Tasks}, {event.DefaultRecordStream, &c.Records}} {
		stream, err := js.Stream(ctx, s.name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := stream.GetMsg(ctx, seq)
			if err != nil {
				t.Fatalf("%s %d: %v", s.name, seq, err)
			}
			*s.into = append(*s.into, record{Subject: m.Subject, Headers: m.Header, Data: m.Data})
		}
	}
	docs, err := fs.Collection(predict.CountsCollection).Documents(ctx).GetAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		out := map[string]string{}
		for k, v := range d.Data() {
			if cells, ok := v.(map[string]any); ok {
				for ck, cv := range cells {
					out["cells."+ck] = fmt.Sprintf("%T %v", cv, cv)
				}
				continue
			}
			out[k] = renderDoc(map[string]any{k: v})[k]
		}
		c.Counts[d.Ref.ID] = out
	}
	return c
}
