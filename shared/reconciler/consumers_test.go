package reconciler_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// A message on a subject no consumer's filter matches (NATS wildcards, one
// filter or several per consumer) is reported once it is older than the
// grace and, with repairs on, becomes one consumer_filter_rejection entry
// with its payload and headers, classified by the policy; a second run
// reports it again (it is still in the stream) but records nothing more.
// Messages some consumer receives are never reported.
func TestUnconsumedMessagesReportedAndRecordedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	for _, c := range []jetstream.ConsumerConfig{
		{Durable: "worker", FilterSubject: "agents.backend.tasks.>", AckPolicy: jetstream.AckExplicitPolicy},
		{Durable: "multi", FilterSubjects: []string{"agents.cto.tasks.review", "agents.*.tasks.debug"}, AckPolicy: jetstream.AckExplicitPolicy},
	} {
		if _, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, c); err != nil {
			t.Fatalf("CreateOrUpdateConsumer(%s): %v", c.Durable, err)
		}
	}
	publish := func(subject string, hdr nats.Header, data string) uint64 {
		t.Helper()
		ack, err := f.js.PublishMsg(f.ctx, &nats.Msg{Subject: subject, Header: hdr, Data: []byte(data)})
		if err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
		return ack.Sequence
	}
	var consumed []uint64
	consumed = append(consumed, publish("agents.backend.tasks.implementation", nil, "a"))
	consumed = append(consumed, publish("agents.cto.tasks.review", nil, "b"))
	consumed = append(consumed, publish("agents.ops.tasks.debug", nil, "c"))
	nobody := publish("agents.nobody.tasks.deploy", nats.Header{
		event.HeaderTenant: {"acme"}, event.HeaderTaskID: {"deploy-1"}, "X-Custom": {"kept"},
	}, `{"deploy":1}`)
	// "agents.backend.tasks.>" needs a token after "tasks".
	ghost := []uint64{publish("agents.ghost.tasks", nil, "g1"), publish("agents.ghost.tasks", nil, "g2")}
	consumed = append(consumed, publish("agents.backend.tasks.review", nil, "d"))

	cfg := reconciler.Config{TimeBudget: time.Minute, WorkStreams: []string{workStream}}
	// Within the grace (2 min) a consumer may still be on its way.
	if rep := f.run(f.handler(cfg, nil), true); len(findings(rep, audit.AlertUnconsumedMessages)) != 0 {
		t.Errorf("messages just published are reported: %s", summary(rep))
	}

	later := func() time.Time { return time.Now().Add(5 * time.Minute) }
	h := f.handler(cfg, later)
	wantExamples := slices.Sorted(slices.Values([]string{event.ID(workStream, ghost[0]), event.ID(workStream, nobody)}))
	check := func(run string, rep *audit.Report, planned, done int) {
		t.Helper()
		fd := finding(t, rep, audit.AlertUnconsumedMessages)
		got := slices.Sorted(slices.Values(fd.Examples))
		if !fd.Alert || fd.Severity != audit.SevError || fd.Section != reconciler.SectionConsumers || fd.Count != 3 || !slices.Equal(got, wantExamples) {
			t.Errorf("%s: %s = %+v, want an ERROR alert counting 3 messages, examples %v", run, audit.AlertUnconsumedMessages, fd, wantExamples)
		}
		for _, part := range []string{"agents.ghost.tasks (2)", "agents.nobody.tasks.deploy (1)", "oldest published"} {
			if !strings.Contains(fd.Message, part) {
				t.Errorf("%s: message %q does not name %q", run, fd.Message, part)
			}
		}
		if fd.Repair == nil || fd.Repair.Planned != planned || fd.Repair.Done != done || fd.Repair.Failed != 0 {
			t.Errorf("%s: repair = %+v, want %d planned, %d done", run, fd.Repair, planned, done)
		}
		if !slices.Contains(f.logs.alerts(t), audit.AlertUnconsumedMessages) {
			t.Errorf("%s: no ERROR log entry with alert=%s", run, audit.AlertUnconsumedMessages)
		}
	}
	ids := func(seqs ...uint64) []string {
		out := make([]string, len(seqs))
		for i, s := range seqs {
			id, err := store.EntryID(event.ID(workStream, s))
			if err != nil {
				t.Fatal(err)
			}
			out[i] = id
		}
		return out
	}
	count := func() int64 {
		t.Helper()
		n, err := f.st.Count(f.ctx, store.Query{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	check("dry run", f.run(h, true), 3, 0)
	if n := count(); n != 0 {
		t.Errorf("dry run created %d entries", n)
	}

	check("first run", f.run(h, false), 3, 3)
	e, err := f.st.Get(f.ctx, ids(nobody)[0])
	if err != nil {
		t.Fatalf("entry of the unconsumed message: %v", err)
	}
	if !bytes.Equal(e.Payload, []byte(`{"deploy":1}`)) || e.Subject != "agents.nobody.tasks.deploy" || e.Tenant != "acme" ||
		e.TaskID != "deploy-1" || event.Header(e.Headers, "X-Custom") != "kept" || e.Kind != string(event.KindExplicit) {
		t.Errorf("entry = payload %q subject %s tenant %s task %s headers %v kind %s; want the message as published",
			e.Payload, e.Subject, e.Tenant, e.TaskID, e.Headers, e.Kind)
	}
	if e.ReasonCode != reconciler.ReasonFilterRejection || e.Category != "permanent" || e.Status != store.Escalated ||
		e.Failure == nil || !strings.Contains(e.Failure.Detail, "no consumer of stream TASKS matches subject agents.nobody.tasks.deploy") {
		t.Errorf("entry = reason %s category %s status %s failure %+v; want consumer_filter_rejection, permanent, escalated (the default policy)",
			e.ReasonCode, e.Category, e.Status, e.Failure)
	}
	for i, id := range ids(ghost...) {
		if e, err := f.st.Get(f.ctx, id); err != nil || string(e.Payload) != []string{"g1", "g2"}[i] {
			t.Errorf("entry %s of an unconsumed message = %+v, %v; want it with its payload", id, e, err)
		}
	}
	got, err := f.st.EntriesByID(f.ctx, ids(consumed...))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids(consumed...) {
		if got[id] != nil {
			t.Errorf("a message some consumer receives got entry %s", id)
		}
	}

	f.logs.reset()
	check("second run", f.run(h, false), 0, 0)
	if n := count(); n != 3 {
		t.Errorf("entries after the second run = %d, want still 3", n)
	}
	str, err := f.js.Stream(f.ctx, workStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := str.Info(f.ctx); err != nil || info.State.Msgs != 7 {
		t.Errorf("work stream holds %+v, %v; want all 7 messages left where they were", info.State, err)
	}

	// A consumer for the subject: its messages are delivered now.
	if _, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "ghost", FilterSubject: "agents.ghost.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	fd := finding(t, f.run(h, false), audit.AlertUnconsumedMessages)
	if fd.Count != 1 || !slices.Equal(fd.Examples, []string{event.ID(workStream, nobody)}) || strings.Contains(fd.Message, "agents.ghost.tasks (") {
		t.Errorf("after a consumer for agents.ghost.> = %+v, want only the deploy message", fd)
	}
}

// A stream without consumers is not audited (workers may use ephemeral
// consumers that exist only while they run), and a consumer without a
// filter receives everything.
func TestUnconsumedNeedsConsumersAndFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	if _, err := f.js.Publish(f.ctx, "agents.nobody.tasks.deploy", []byte("x")); err != nil {
		t.Fatal(err)
	}
	h := f.handler(reconciler.Config{TimeBudget: time.Minute, WorkStreams: []string{workStream}}, func() time.Time { return time.Now().Add(5 * time.Minute) })
	rep := f.run(h, false)
	if len(findings(rep, audit.AlertUnconsumedMessages)) != 0 {
		t.Errorf("stream without consumers: %s", summary(rep))
	}
	if sec := section(t, rep, reconciler.SectionConsumers); sec.Status != audit.StatusComplete || !strings.Contains(sec.Note, "no consumers") {
		t.Errorf("consumers section = %+v, want complete with a note on the missing consumers", sec)
	}
	if _, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "all", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if rep := f.run(h, false); len(findings(rep, audit.AlertUnconsumedMessages)) != 0 {
		t.Errorf("consumer without filter: %s", summary(rep))
	}
}

// The audit reads at most MaxUnconsumedMsgs messages per stream per run;
// the next runs continue where it stopped, every message is recorded once.
func TestUnconsumedBoundedPerRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	if _, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{Durable: "worker", FilterSubject: "agents.backend.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"agents.a.tasks.x", "agents.b.tasks.x", "agents.a.tasks.x", "agents.b.tasks.x", "agents.a.tasks.x"} {
		if _, err := f.js.Publish(f.ctx, subj, []byte(subj)); err != nil {
			t.Fatal(err)
		}
	}
	h := f.handler(reconciler.Config{TimeBudget: time.Minute, WorkStreams: []string{workStream}, MaxUnconsumedMsgs: 3},
		func() time.Time { return time.Now().Add(5 * time.Minute) })
	done := 0
	for run := 0; run < 6 && done < 5; run++ {
		rep, err := h.Run(f.ctx, false)
		if err != nil || len(rep.Errors) > 0 {
			t.Fatalf("run %d = %v %v", run, err, rep.Errors)
		}
		fd := finding(t, rep, audit.AlertUnconsumedMessages)
		if fd.Count != 5 {
			t.Errorf("run %d counts %d unconsumed messages, want 5", run, fd.Count)
		}
		done += fd.Repair.Done
		if fd.Repair.Planned > 3 {
			t.Errorf("run %d planned %d, want at most the 3 messages it may read", run, fd.Repair.Planned)
		}
	}
	n, err := f.st.Count(f.ctx, store.Query{})
	if done != 5 || err != nil || n != 5 {
		t.Errorf("recorded %d (entries %d, %v), want each of the 5 messages once", done, n, err)
	}
}

// A stream that does not exist (not created yet, or a name set wrong) is
// counted and noted by the sections that read it, not a failure of theirs:
// there is nothing of it to audit.
func TestMissingStreamsNoted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	for _, name := range []string{advStream, recStream} {
		if err := f.js.DeleteStream(f.ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	cfg := reconciler.Config{TimeBudget: time.Minute, WorkStreams: []string{"NO_WORK"}}
	// The traffic section samples the work streams and fails on a missing
	// one (its table would be wrong): that is its error, the run goes on.
	rep, err := f.handler(cfg, nil).Run(f.ctx, false)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(rep.Errors) != 1 || !strings.HasPrefix(rep.Errors[0], reconciler.SectionTraffic+":") {
		t.Errorf("Run errors = %v, want only the traffic section's", rep.Errors)
	}
	for _, tt := range []struct {
		section string
		streams []string
	}{
		{reconciler.SectionCapture, []string{advStream, recStream}},
		{reconciler.SectionConsumers, []string{"NO_WORK"}},
	} {
		sec := section(t, rep, tt.section)
		if sec.Status != audit.StatusComplete || sec.Counts["streams_missing"] != int64(len(tt.streams)) {
			t.Errorf("%s section = %+v, want complete with streams_missing %d", tt.section, sec, len(tt.streams))
		}
		for _, name := range tt.streams {
			if !strings.Contains(sec.Note, "stream "+name+" does not exist") {
				t.Errorf("%s note = %q, want it to say stream %s does not exist", tt.section, sec.Note, name)
			}
		}
	}
}

// A work stream whose JetStream API the reconciler's NATS user may not use
// never answers (the server drops the request; the client gets only an
// asynchronous permissions violation). The traffic and consumers sections
// fail that stream after one IOTimeout, naming it, instead of waiting for
// the run's deadline (which left the sections after traffic no time at
// all), and the work stream after it is still audited. The traffic table's
// DLQ rate is then unknown (-1), not a rate over the streams sampled.
func TestConsumersKeepGoingPastAFailingStream(t *testing.T) {
	t.Parallel()
	const user, denied = "reconcile", "DENIED_WORK"
	f := newFixture(t, true, testenv.WithPublishDenied(user, "$JS.API.STREAM.INFO."+denied))
	if _, err := f.js.CreateStream(f.ctx, jetstream.StreamConfig{Name: denied, Subjects: []string{"denied.>"}}); err != nil {
		t.Fatalf("CreateStream(%s): %v", denied, err)
	}
	if _, err := f.js.CreateOrUpdateConsumer(f.ctx, workStream, jetstream.ConsumerConfig{
		Durable: "worker", FilterSubject: "agents.backend.tasks.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("CreateOrUpdateConsumer: %v", err)
	}
	later := func() time.Time { return time.Now().Add(5 * time.Minute) }
	// A run with every permission samples both streams before anything is
	// published, so the restricted run below has 1 message published on
	// the stream it samples and 1 death of the denied one: a rate over the
	// sampled streams alone would read 100 %.
	f.run(f.handler(reconciler.Config{TimeBudget: time.Minute, WorkStreams: []string{denied, workStream}}, later), false)
	dead := entry(1, "acme", store.Escalated)
	dead.EventID, dead.Stream = event.ID(denied, 1), denied
	id, err := store.EntryID(dead.EventID)
	if err != nil {
		t.Fatal(err)
	}
	dead.ID = id
	f.seed(f.st, dead)
	ack, err := f.js.Publish(f.ctx, "agents.nobody.tasks.deploy", []byte(`{"deploy":1}`))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	rjs, _ := f.connectAs(user)
	cfg := reconciler.Config{TimeBudget: time.Minute, IOTimeout: 2 * time.Second, WorkStreams: []string{denied, workStream}}
	rep, err := f.handler(cfg, later, viaJetStream(rjs)).Run(f.ctx, true)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	sec := section(t, rep, reconciler.SectionConsumers)
	if want := "stream " + denied + ": "; sec.Status != audit.StatusError || !strings.HasPrefix(sec.Error, want) || !strings.Contains(sec.Error, "no answer within 2s") {
		t.Errorf("consumers section = %s %q, want error %q... saying it got no answer in IOTimeout", sec.Status, sec.Error, want)
	}
	if sec.Counts["consumers_"+workStream] != 1 {
		t.Errorf("consumers counts = %v, want 1 consumer of %s: the stream after the failing one is audited", sec.Counts, workStream)
	}
	// The traffic section samples the same work streams, each under a bound
	// of its own too.
	if rep.Traffic == nil || len(rep.Traffic.Streams) != 2 {
		t.Fatalf("traffic = %+v, want a row for each of the 2 work streams", rep.Traffic)
	}
	if row := rep.Traffic.Streams[0]; row.Stream != denied || !strings.Contains(row.Error, "no answer within 2s") {
		t.Errorf("traffic row %s error %q, want %s saying it got no answer in IOTimeout", row.Stream, row.Error, denied)
	}
	if row := rep.Traffic.Streams[1]; row.Stream != workStream || row.Error != "" {
		t.Errorf("traffic row %s error %q, want %s sampled", row.Stream, row.Error, workStream)
	}
	// Published lacks the failing stream, Dead counts its death.
	if tr := rep.Traffic; tr.Published != 1 || tr.Dead != 1 || tr.DLQRate != -1 {
		t.Errorf("traffic published %d, dead %d, DLQ rate %v with %s unsampled; want 1, 1, -1 (unknown)", tr.Published, tr.Dead, tr.DLQRate, denied)
	}
	fd := finding(t, rep, audit.AlertUnconsumedMessages)
	if want := []string{event.ID(workStream, ack.Sequence)}; fd.Count != 1 || !slices.Equal(fd.Examples, want) {
		t.Errorf("%s = %+v, want 1 message, examples %v", audit.AlertUnconsumedMessages, fd, want)
	}
}
