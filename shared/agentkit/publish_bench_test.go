package agentkit_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/store"
)

// BenchmarkPublish compares Publish with the pre-flight off and on (a model
// of 500 rows besides testModel's, 50 agents × 10 types): the pre-flight
// adds a lookup, a few headers and an in-memory count, no I/O. The work
// stream keeps the last 1 000 tasks so that the benchmark's size does not
// grow the store.
func BenchmarkPublish(b *testing.B) {
	ctx := testenv.Context(b)
	_, js := testenv.NewNATS(b).Connect(b)
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, obs.Discard()); err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"},
		MaxMsgs: 1000, Discard: jetstream.DiscardOld}); err != nil {
		b.Fatal(err)
	}
	fs, _ := testenv.Firestore(b)
	m := testModel()
	for a := range 50 {
		for ty := range 10 {
			m.Predictions = append(m.Predictions, predict.Prediction{
				Key:   predict.Key{Agent: fmt.Sprintf("agent%d", a), TaskType: fmt.Sprintf("type%d", ty), Feature: predict.FeatureAll, Bucket: predict.BucketAll},
				Tasks: 100, Deaths: 60, Probability: 0.6, Confidence: 0.5, Reason: "timeout"})
		}
	}
	if _, err := store.New(fs).SavePredictionModel(ctx, m); err != nil {
		b.Fatal(err)
	}
	small, big := []byte(`{"task":"rename a variable"}`), bytes.Repeat([]byte("x"), 100<<10)
	cases := []struct {
		name    string
		opts    []agentkit.Option
		payload []byte
	}{
		{"predictions=off", nil, small},
		{"predictions=on/none", []agentkit.Option{agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour)}, small},
		{"predictions=off/100KiB", nil, big},
		{"predictions=on/strategy/100KiB", []agentkit.Option{agentkit.WithFirestore(fs), agentkit.WithPredictions(time.Hour)}, big},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			kit := agentkit.New(js, c.opts...)
			defer kit.Close(context.Background())
			if len(c.opts) > 0 {
				if err := kit.RefreshPredictions(ctx); err != nil {
					b.Fatal(err)
				}
			}
			hdr := map[string][]string{"X-Task-ID": {"t"}}
			b.ReportAllocs()
			b.SetBytes(int64(len(c.payload)))
			for b.Loop() {
				if _, err := kit.Publish(ctx, "agents.coder.tasks.refactor", c.payload, hdr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
