package reconciler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// The capture audit checks advisories and explicit records only once they
// are older than the grace the bridge and classify need; malformed ones are
// counted, not reported (the bridge rejects them too); a missing entry is
// re-driven once, and a re-driven copy that still has no entry is reported
// again without a second re-drive.
func TestCaptureGraceRecordsAndRedriveOnce(t *testing.T) {
	f := newFixture(t, true)
	// An explicit record (agentkit.Terminate) of message 5, no entry.
	hdr, body, err := event.Record{
		Meta: event.RecordMeta{Stream: workStream, StreamSeq: 5, Subject: "agents.backend.tasks.implementation",
			PublishedAt: time.Now().UTC(), Failure: event.Failure{Code: "context_window_overflow", RecordedAt: time.Now().UTC()}},
		Data: []byte(`{"task":5}`),
	}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.js.PublishMsg(f.ctx, &nats.Msg{Subject: event.RecordSubject(workStream), Header: nats.Header(hdr), Data: body}); err != nil {
		t.Fatal(err)
	}
	// Message 6: advisory with its entry. Malformed advisory: counted only.
	f.advisory(6)
	f.seed(f.st, entry(6, "acme", store.Escalated))
	if _, err := f.js.Publish(f.ctx, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TASKS.worker", []byte("{not json")); err != nil {
		t.Fatal(err)
	}

	// Within the grace nothing is a finding and the cursor stays put.
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, nil)
	rep := f.run(h, false)
	if len(findings(rep, audit.AlertAdvisoryEntryMismatch)) != 0 {
		t.Fatalf("fresh captures reported: %s", summary(rep))
	}
	sec := section(t, rep, reconciler.SectionCapture)
	if sec.Counts["pending_"+advStream] != 2 || sec.Counts["pending_"+recStream] != 1 {
		t.Errorf("capture counts = %v, want 2 advisories and 1 record pending", sec.Counts)
	}

	// Twenty minutes later (the clock moved, not the test) they are due.
	later := func() time.Time { return time.Now().Add(20 * time.Minute) }
	h = f.handler(reconciler.Config{TimeBudget: time.Minute}, later)
	rep = f.run(h, false)
	fd := finding(t, rep, audit.AlertAdvisoryEntryMismatch)
	if fd.Count != 1 || fd.Examples[0] != event.ID(workStream, 5) || fd.Repair.Done != 1 {
		t.Errorf("mismatch = %+v, want the record of message 5 re-driven", fd)
	}
	sec = section(t, rep, reconciler.SectionCapture)
	if sec.Counts["unparseable_"+advStream] != 1 || sec.Counts["checked_"+advStream] != 1 || sec.Counts["checked_"+recStream] != 1 {
		t.Errorf("capture counts = %v, want 1 advisory checked, 1 unparseable, 1 record checked", sec.Counts)
	}
	// The re-driven record parses to the same event id, so the bridge
	// forwards it as the same event.
	last := f.lastMsg(recStream)
	rec, err := event.ParseRecord(last.Header, last.Data)
	if err != nil || event.ID(rec.Meta.Stream, rec.Meta.StreamSeq) != event.ID(workStream, 5) || string(rec.Data) != `{"task":5}` {
		t.Fatalf("re-driven record = %+v, %v; want the record of %s", rec, err, event.ID(workStream, 5))
	}
	if !strings.HasPrefix(last.Header.Get(jetstream.MsgIDHeader), reconciler.RedrivePrefix) {
		t.Errorf("re-driven record id = %q, want the re-drive prefix", last.Header.Get(jetstream.MsgIDHeader))
	}

	// Still no entry for the re-driven copy: reported, not re-driven again.
	rep = f.run(h, false)
	fd = finding(t, rep, audit.AlertAdvisoryEntryMismatch)
	if fd.Count != 1 || fd.Repair.Planned != 0 || len(fd.Repair.Notes) != 1 {
		t.Errorf("re-driven copy without entry = %+v, want reported with a note and no second re-drive", fd)
	}
	if got := f.lastMsg(recStream).Sequence; got != last.Sequence {
		t.Errorf("record stream grew to %d, want no second re-drive (last %d)", got, last.Sequence)
	}
	// Once checked, a message is not checked again.
	rep = f.run(h, false)
	if len(rep.Findings) != 0 {
		t.Errorf("fourth run findings: %s", summary(rep))
	}
}

func section(t *testing.T, rep *audit.Report, name string) *audit.Section {
	t.Helper()
	for _, s := range rep.Sections {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("report has no section %s", name)
	return nil
}
