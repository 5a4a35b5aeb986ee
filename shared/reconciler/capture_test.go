package reconciler_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
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
	t.Parallel()
	f := newFixture(t, true)
	// An explicit record (agentkit.Terminate) of message 5, no entry.
	f.record(5)
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

// A stream the reconciler cannot read (here its NATS user may not use that
// stream's JetStream API: a real permissions violation, and the request gets
// no answer) fails the capture section with an error naming the stream, and
// does not keep the other stream from its audit, whichever of the two fails
// and at whichever request. The failing stream's cursor stays where it was,
// so nothing of it is lost: once the permissions are fixed, the next run
// audits its messages.
func TestCaptureKeepsGoingPastAFailingStream(t *testing.T) {
	t.Parallel()
	const user = "reconcile"
	// Each stream holds two due messages, one of them without an entry:
	// advisories of messages 6 (entry) and 7, records of 5 and 8 (entry).
	missing := map[string]string{advStream: event.ID(workStream, 7), recStream: event.ID(workStream, 5)}
	later := func() time.Time { return time.Now().Add(20 * time.Minute) }
	for _, tc := range []struct {
		name    string
		deny    []string // publish subjects the reconciler's user is denied
		failing string   // the stream that fails; the other must be audited
		wantErr string   // the section's error starts so
	}{
		{
			name:    "advisory stream lookup",
			deny:    []string{"$JS.API.STREAM.INFO." + advStream},
			failing: advStream,
			wantErr: "stream " + advStream + ": ",
		},
		{
			name: "advisory stream messages",
			// GetMsg asks JetStream's direct get when the stream allows
			// it, the stream leader otherwise: deny both.
			deny:    []string{"$JS.API.STREAM.MSG.GET." + advStream, "$JS.API.DIRECT.GET." + advStream + ".>", "$JS.API.DIRECT.GET." + advStream},
			failing: advStream,
			wantErr: "stream " + advStream + " seq 1: ",
		},
		{
			name:    "record stream lookup",
			deny:    []string{"$JS.API.STREAM.INFO." + recStream},
			failing: recStream,
			wantErr: "stream " + recStream + ": ",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true, testenv.WithPublishDenied(user, tc.deny...))
			f.record(5)
			f.advisory(6)
			f.seed(f.st, entry(6, "acme", store.Escalated))
			f.advisory(7)
			f.record(8)
			f.seed(f.st, entry(8, "acme", store.Escalated))
			other := advStream
			if tc.failing == advStream {
				other = recStream
			}

			// The premise: the failure is the server's refusal, not
			// something else of the test's making.
			rjs, violations := f.connectAs(user)
			cfg := reconciler.Config{TimeBudget: time.Minute, IOTimeout: 2 * time.Second}
			rep, err := f.handler(cfg, later, viaJetStream(rjs)).Run(f.ctx, false)
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			if err := received(f.ctx, violations); !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("reconciler's connection got %v, want a permissions violation: the stream failed for another reason", err)
			}

			sec := section(t, rep, reconciler.SectionCapture)
			if sec.Status != audit.StatusError || !strings.HasPrefix(sec.Error, tc.wantErr) || !strings.Contains(sec.Error, "no answer within 2s") {
				t.Errorf("capture section = %s %q, want error %q... saying it got no answer in IOTimeout", sec.Status, sec.Error, tc.wantErr)
			}
			if want := reconciler.SectionCapture + ": " + sec.Error; !slices.Contains(rep.Errors, want) {
				t.Errorf("report errors = %q, want %q", rep.Errors, want)
			}
			// The other stream is audited in full, its missing entry re-driven.
			want := map[string]int64{"checked_" + other: 2, "missing_" + other: 1}
			if diff := cmp.Diff(want, sec.Counts); diff != "" {
				t.Errorf("capture counts with %s failing (-want +got):\n%s", tc.failing, diff)
			}
			fd := finding(t, rep, audit.AlertAdvisoryEntryMismatch)
			if !slices.Equal(fd.Examples, []string{missing[other]}) || fd.Repair.Done != 1 {
				t.Errorf("mismatch = %+v, want %s re-driven", fd, missing[other])
			}

			// Permissions fixed: the failing stream is audited from where
			// it stood, and its missing entry is found.
			rep = f.run(f.handler(cfg, later), false)
			sec = section(t, rep, reconciler.SectionCapture)
			if sec.Counts["checked_"+tc.failing] != 2 || sec.Counts["missing_"+tc.failing] != 1 {
				t.Errorf("capture counts after the fix = %v, want 2 of %s checked and 1 missing", sec.Counts, tc.failing)
			}
			fd = finding(t, rep, audit.AlertAdvisoryEntryMismatch)
			if !slices.Contains(fd.Examples, missing[tc.failing]) {
				t.Errorf("mismatch after the fix = %+v, want %s among the examples", fd, missing[tc.failing])
			}
		})
	}
}

// A re-drive the NATS user may not publish gets no answer either (the
// server drops it), so one such re-drive stops the stream's re-drives for
// the run instead of each missing entry waiting IOTimeout, which spent the
// budget of the sections after capture. The audit itself goes on, every
// missing entry is reported, and the cursor moves on as for any failed
// re-drive (a re-drive is tried once per message).
func TestCaptureStopsRedrivesWithoutPublishPermission(t *testing.T) {
	t.Parallel()
	const user = "reconcile"
	f := newFixture(t, true, testenv.WithPublishDenied(user, event.RecordSubjectPrefix+".>"))
	f.advisory(7) // no entry: re-drivable, the advisory subjects are allowed
	var missing []string
	for _, seq := range []uint64{5, 8, 9, 10, 11} {
		f.record(seq)
		if seq == 8 {
			f.seed(f.st, entry(seq, "acme", store.Escalated))
			continue
		}
		missing = append(missing, event.ID(workStream, seq))
	}
	later := func() time.Time { return time.Now().Add(20 * time.Minute) }
	cfg := reconciler.Config{TimeBudget: time.Minute, IOTimeout: 2 * time.Second}

	rjs, async := f.connectAs(user)
	rep := f.run(f.handler(cfg, later, viaJetStream(rjs)), false) // no section failed
	if err := received(f.ctx, async); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("reconciler's connection got %v, want a permissions violation: the re-drive failed for another reason", err)
	}
	if !rep.Complete || rep.BudgetExhausted {
		t.Errorf("run complete %v, budget exhausted %v; want every section run in full", rep.Complete, rep.BudgetExhausted)
	}
	sec := section(t, rep, reconciler.SectionCapture)
	want := map[string]int64{"checked_" + advStream: 1, "missing_" + advStream: 1,
		"checked_" + recStream: 5, "missing_" + recStream: 4, "redrive_held_" + recStream: 3}
	if diff := cmp.Diff(want, sec.Counts); diff != "" {
		t.Errorf("capture counts (-want +got):\n%s", diff)
	}
	// One re-drive waited and failed, not one per missing record; the
	// advisory's was made.
	fd := finding(t, rep, audit.AlertAdvisoryEntryMismatch)
	if diff := cmp.Diff(audit.RepairTotals{Planned: 5, Done: 1, Failed: 1}, fd.Repair.RepairTotals); diff != "" {
		t.Errorf("re-drives (-want +got):\n%s", diff)
	}
	if len(fd.Repair.Errors) != 1 || !strings.Contains(fd.Repair.Errors[0], "permission to publish to the subjects of stream "+recStream) {
		t.Errorf("re-drive errors = %q, want one naming the publish permission on %s's subjects", fd.Repair.Errors, recStream)
	}
	notes := 0
	for _, n := range fd.Repair.Notes {
		if strings.HasPrefix(n, "stream "+recStream+": re-drives stopped") {
			notes++
		}
	}
	if notes != 1 {
		t.Errorf("re-drive notes = %q, want one saying %s's re-drives stopped", fd.Repair.Notes, recStream)
	}

	// The three not tried are each logged with their event ids.
	var notTried []string
	sc := bufio.NewScanner(bytes.NewReader(f.logs.bytes()))
	for sc.Scan() {
		var l struct {
			Message string `json:"message"`
			EventID string `json:"event_id"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "reconcile: capture re-drive not tried" {
			notTried = append(notTried, l.EventID)
		}
	}
	if len(notTried) != 3 {
		t.Errorf("logged re-drives not tried = %v, want 3 of %v", notTried, missing)
	}
	// The four records' event ids are the finding's examples: nothing missing
	// goes unreported though only one re-drive was tried.
	for _, id := range missing {
		if !slices.Contains(fd.Examples, id) {
			t.Errorf("examples = %v, want %s among them", fd.Examples, id)
		}
	}

	// The cursor moved on all the same (held before the first, a
	// deployment that grants no publish permission would re-read the same
	// messages every run and never reach newer ones): the next run reads
	// only what came since, one new record.
	f.record(12)
	rep = f.run(f.handler(cfg, later, viaJetStream(rjs)), false)
	sec = section(t, rep, reconciler.SectionCapture)
	if got := sec.Counts["checked_"+recStream]; got != 1 {
		t.Errorf("next run checked %d records, want 1: the one published since", got)
	}
}

// received is the first value of ch, or nil when ctx ends first.
func received[T any](ctx context.Context, ch <-chan T) T {
	select {
	case v := <-ch: // already there: even when ctx has ended too
		return v
	default:
	}
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		var zero T
		return zero
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
