package bridge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/nats-io/nats.go/jetstream"
)

func TestEnsureCreatesThenAccepts(t *testing.T) {
	t.Parallel()
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ctx := testenv.Context(t)
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, obs.Discard()); err != nil {
		t.Fatalf("Ensure on an empty server = %v", err)
	}
	for name, want := range map[string]jetstream.StreamConfig{
		"DLQ_ADVISORIES": bridge.AdvisoryStreamConfig("DLQ_ADVISORIES", bridge.DefaultAdvisoryLimits),
		"DLQ_RECORDS":    bridge.RecordStreamConfig("DLQ_RECORDS", bridge.DefaultRecordLimits),
	} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := s.CachedInfo().Config
		if got.Retention != want.Retention || got.Storage != jetstream.FileStorage || got.MaxMsgs != want.MaxMsgs || got.MaxBytes != want.MaxBytes ||
			got.Discard != jetstream.DiscardNew || got.MaxAge != 0 || got.Duplicates < want.Duplicates {
			t.Errorf("%s created as %+v", name, got)
		}
	}
	kv, err := js.KeyValue(ctx, "dlq_failures")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := kv.Status(ctx)
	if st.TTL() != bridge.DefaultFailureTTL {
		t.Errorf("bucket TTL = %v, want %v", st.TTL(), bridge.DefaultFailureTTL)
	}
	// A second bridge (or a restart) accepts what exists.
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, obs.Discard()); err != nil {
		t.Fatalf("Ensure on its own resources = %v", err)
	}
}

func TestEnsureKeepsTunedLimits(t *testing.T) {
	t.Parallel()
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ctx := testenv.Context(t)
	tuned := bridge.AdvisoryStreamConfig("DLQ_ADVISORIES", bridge.DefaultAdvisoryLimits)
	tuned.MaxMsgs = 5_000_000
	if _, err := js.CreateStream(ctx, tuned); err != nil {
		t.Fatal(err)
	}
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, obs.Discard()); err != nil {
		t.Fatalf("Ensure with tuned limits = %v", err)
	}
	s, _ := js.Stream(ctx, "DLQ_ADVISORIES")
	if got := s.CachedInfo().Config.MaxMsgs; got != 5_000_000 {
		t.Errorf("max_msgs after Ensure = %d, want the operator's 5000000", got)
	}
}

// The limits configured (ADVISORY_STREAM_MAX_*, RECORD_STREAM_MAX_*) size
// the streams Ensure creates.
func TestEnsureCreatesConfiguredLimits(t *testing.T) {
	t.Parallel()
	_, js := testenv.NewNATS(t).Connect(t)
	ctx := testenv.Context(t)
	adv, rec := bridge.StreamLimits{MaxMsgs: 50}, bridge.StreamLimits{MaxBytes: 1 << 20, MaxAge: 48 * time.Hour}
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, obs.Discard(), bridge.WithLimits(adv, rec)); err != nil {
		t.Fatalf("Ensure = %v", err)
	}
	for name, want := range map[string][3]int64{"DLQ_ADVISORIES": {50, -1, 0}, "DLQ_RECORDS": {-1, 1 << 20, int64(48 * time.Hour)}} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := s.CachedInfo().Config
		if got := [3]int64{c.MaxMsgs, c.MaxBytes, int64(c.MaxAge)}; got != want || c.Discard != jetstream.DiscardNew {
			t.Errorf("%s limits = %v discard %s, want %v discard new", name, got, c.Discard, want)
		}
	}
}

// A capture stream made before discard new (discard old, the old default) is
// moved to discard new, its limits and every message it holds kept; a full
// one then refuses a new record instead of dropping the oldest.
func TestEnsureMigratesDiscardOld(t *testing.T) {
	t.Parallel()
	_, js := testenv.NewNATS(t).Connect(t)
	ctx := testenv.Context(t)
	old := bridge.RecordStreamConfig("DLQ_RECORDS", bridge.StreamLimits{MaxMsgs: 3})
	old.Discard = jetstream.DiscardOld
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "dlq.records.TASKS", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, obs.Discard()); err != nil {
		t.Fatalf("Ensure over a discard-old stream = %v", err)
	}
	s, err := js.Stream(ctx, "DLQ_RECORDS")
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Config.Discard != jetstream.DiscardNew || info.Config.MaxMsgs != 3 || info.State.Msgs != 3 || info.State.FirstSeq != 1 {
		t.Fatalf("after Ensure: discard %s max_msgs %d, %d messages from seq %d; want discard new, the 3 kept",
			info.Config.Discard, info.Config.MaxMsgs, info.State.Msgs, info.State.FirstSeq)
	}
	if _, err := js.Publish(ctx, "dlq.records.TASKS", []byte("one too many")); err == nil {
		t.Errorf("publish into the full stream = nil, want it refused")
	}
	if info, _ := s.Info(ctx); info.State.FirstSeq != 1 || info.State.Msgs != 3 {
		t.Errorf("after the refused publish: %d messages from seq %d, want the 3 from seq 1", info.State.Msgs, info.State.FirstSeq)
	}
}

func TestEnsureRefusesIncompatible(t *testing.T) {
	t.Parallel()
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ctx := testenv.Context(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ_ADVISORIES",
		Subjects: []string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ_RECORDS", Subjects: []string{"dlq.records.>"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	err := bridge.Ensure(ctx, js, bridge.DefaultNames, obs.Discard())
	if !errors.Is(err, bridge.ErrIncompatible) {
		t.Fatalf("Ensure = %v, want ErrIncompatible", err)
	}
	for _, want := range []string{
		`stream DLQ_ADVISORIES`, `lack "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>"`, "storage is Memory",
		`stream DLQ_RECORDS`, "retention is WorkQueue",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Ensure error %q does not mention %q", err, want)
		}
	}
	// Nothing was changed.
	s, _ := js.Stream(ctx, "DLQ_ADVISORIES")
	if cfg := s.CachedInfo().Config; len(cfg.Subjects) != 1 || cfg.Storage != jetstream.MemoryStorage {
		t.Errorf("Ensure changed the stream: %+v", cfg)
	}
}

func TestEnsureTopic(t *testing.T) {
	t.Parallel()
	ps, project := testenv.PubSub(t)
	ctx := testenv.Context(t)
	n := testenv.NewNATS(t)
	nc, _ := n.Connect(t)
	topic := "projects/" + project + "/topics/dlq-events"
	cfg := bridge.Config{Topic: "dlq-events", Names: bridge.DefaultNames, Consumer: "dlq-bridge"}

	// Off (production): a missing topic is a clear startup error.
	b, err := bridge.New(cfg, nc, ps, obs.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Run(ctx); err == nil || !strings.Contains(err.Error(), "topic "+topic) {
		t.Fatalf("Run without the topic = %v, want an error naming %s", err, topic)
	}
	// On (emulator): the bridge creates it.
	cfg.EnsureTopic = true
	b, err = bridge.New(cfg, nc, ps, obs.Discard())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := runHealthy(t, runCtx, b)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if _, err := ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic}); err != nil {
		t.Errorf("topic after ensure-topic: %v", err)
	}
}

func TestConsumerDeletedEndsRun(t *testing.T) {
	t.Parallel()
	// Someone deletes the bridge's consumer: Run ends with the error so the
	// process restarts and recreates it, instead of idling forever.
	ps, project := testenv.PubSub(t)
	ctx := testenv.Context(t)
	n := testenv.NewNATS(t)
	nc, js := n.Connect(t)
	b, err := bridge.New(bridge.Config{Topic: "projects/" + project + "/topics/dlq-events", Names: bridge.DefaultNames, Consumer: "dlq-bridge",
		EnsureTopic: true}, nc, ps, obs.Discard())
	if err != nil {
		t.Fatal(err)
	}
	done := runHealthy(t, ctx, b)
	if err := js.DeleteConsumer(ctx, "DLQ_RECORDS", "dlq-bridge"); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Await(t, done, 30*time.Second, "Run to end after its consumer was deleted"); !errors.Is(err, jetstream.ErrConsumerDeleted) {
		t.Errorf("Run after its consumer was deleted = %v, want ErrConsumerDeleted", err)
	}
}
