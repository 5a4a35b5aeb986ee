package reconciler_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// A capture stream 80 % full alerts, with the bridge's backlog in the
// report; once the bridge acknowledged the records and the capture audit
// found their entries, reconcile trims them and the alert clears. Trimming
// is idempotent: a second run purges nothing more and loses nothing the
// bridge has not forwarded.
func TestCaptureStreamFillAndTrim(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	rs, err := f.js.Stream(f.ctx, recStream)
	if err != nil {
		t.Fatal(err)
	}
	small := rs.CachedInfo().Config
	small.MaxMsgs = 5
	if _, err := f.js.UpdateStream(f.ctx, small); err != nil {
		t.Fatal(err)
	}
	bridgeConsumer, err := f.js.CreateOrUpdateConsumer(f.ctx, recStream, jetstream.ConsumerConfig{Durable: event.DefaultBridgeConsumer, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 4; seq++ {
		f.record(seq)
		f.seed(f.st, entry(seq, "acme", store.Escalated))
	}
	h := f.handler(reconciler.Config{TimeBudget: time.Minute, CaptureGrace: time.Millisecond}, nil)

	rep := f.run(h, false)
	fd := finding(t, rep, audit.AlertCaptureStreamFilling)
	if fd.Count != 1 || len(fd.Examples) != 1 || fd.Severity != audit.SevError {
		t.Errorf("filling = %+v, want the record stream at 80 %%, an error", fd)
	}
	sec := section(t, rep, reconciler.SectionStreams)
	want := map[string]int64{"fill_percent_" + recStream: 80, "bridge_backlog_" + recStream: 4, "messages_" + recStream: 4}
	for k, v := range want {
		if sec.Counts[k] != v {
			t.Errorf("%s = %d, want %d (counts %v)", k, sec.Counts[k], v, sec.Counts)
		}
	}
	if sec.Counts["trimmed_"+recStream] != 0 {
		t.Errorf("trimmed %d records the bridge has not forwarded", sec.Counts["trimmed_"+recStream])
	}

	// The bridge forwards three of the four.
	batch, err := bridgeConsumer.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []struct{ trimmed, left, fill int64 }{{3, 1, 20}, {0, 1, 20}} {
		rep = f.run(h, false)
		if fs := findings(rep, audit.AlertCaptureStreamFilling); len(fs) != 0 {
			t.Errorf("run %d: filling alert still raised at %v", i+2, fs[0].Examples)
		}
		sec = section(t, rep, reconciler.SectionStreams)
		if got := sec.Counts["trimmed_"+recStream]; got != want.trimmed || sec.Counts["messages_"+recStream] != want.left ||
			sec.Counts["fill_percent_"+recStream] != want.fill || sec.Counts["bridge_backlog_"+recStream] != 1 {
			t.Errorf("run %d: counts %v, want %d trimmed, %d left (%d %%), a backlog of 1", i+2, sec.Counts, want.trimmed, want.left, want.fill)
		}
	}
	// The one the bridge has not forwarded is still there.
	if m, err := rs.GetMsg(f.ctx, 4); err != nil || m.Sequence != 4 {
		t.Errorf("record 4 = %v, %v; want it kept for the bridge", m, err)
	}
}
