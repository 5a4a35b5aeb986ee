package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// RedrivePrefix starts the Nats-Msg-Id of an advisory or record reconcile
// published again; a copy is re-driven once, never again.
const RedrivePrefix = "jsdlq-redrive."

// captured is one advisory or record: the entry it must have produced.
type captured struct {
	seq      uint64
	eventID  string
	entryID  string
	subject  string
	header   nats.Header
	data     []byte
	redriven bool
}

// capture checks that every advisory and explicit record old enough to have
// gone through the bridge and classify has its failure-log entry. A missing
// entry is re-driven: the advisory or record is published again into its
// stream, so the bridge forwards it again under the same event id (classify
// creates the entry if it is absent and changes nothing if it exists).
func (r *run) capture(ctx context.Context, sec *audit.Section) error {
	js, err := r.jetStream(ctx, false)
	if err != nil {
		return err
	}
	if r.state.Capture == nil {
		r.state.Capture = map[string]int64{}
	}
	var f *audit.Finding
	return eachStream([]string{r.h.cfg.AdvisoryStream, r.h.cfg.RecordStream}, func(name string) error {
		return r.captureStream(ctx, sec, js, name, &f)
	})
}

func (r *run) captureStream(ctx context.Context, sec *audit.Section, js jetstream.JetStream, name string, f **audit.Finding) error {
	str, err := r.stream(ctx, sec, js, name)
	if err != nil || str == nil {
		return err
	}
	info := str.CachedInfo()
	last := info.State.LastSeq
	if uint64(max(r.state.Capture[name], 0)) > last {
		// The stream was recreated: its sequences start over.
		sec.Add("cursor_reset_"+name, 1)
		r.state.Capture[name] = 0
	}
	seq := max(uint64(max(r.state.Capture[name], 0))+1, info.State.FirstSeq)
	checked := 0
	// stopped: a re-drive into this stream got no answer, so none more is
	// tried this run.
	stopped := false
	for seq <= last {
		if r.over() || checked >= r.h.cfg.MaxCaptureMsgs {
			return errBudget
		}
		var batch []captured
		stop := false
		for seq <= last && len(batch) < r.h.cfg.PageSize && checked+len(batch) < r.h.cfg.MaxCaptureMsgs {
			m, err := askJetStream(ctx, r.h, func(ctx context.Context) (*jetstream.RawStreamMsg, error) { return str.GetMsg(ctx, seq) })
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				seq++ // removed by the stream's limits
				continue
			}
			if err != nil {
				return fmt.Errorf("stream %s seq %d: %w", name, seq, err)
			}
			if r.now().Sub(m.Time) < r.h.cfg.CaptureGrace {
				sec.Add("pending_"+name, int64(last-seq+1))
				stop = true
				break
			}
			c, ok := parseCaptured(name == r.h.cfg.RecordStream, m)
			seq++
			if !ok {
				sec.Add("unparseable_"+name, 1) // the bridge rejects it too
				continue
			}
			batch = append(batch, c)
		}
		ids := make([]string, len(batch))
		for i, c := range batch {
			ids[i] = c.entryID
		}
		entries, err := r.h.store.EntriesByID(ctx, ids)
		if err != nil {
			return err
		}
		for _, c := range batch {
			sec.Add("checked_"+name, 1)
			if entries[c.entryID] != nil {
				continue
			}
			sec.Add("missing_"+name, 1)
			if *f == nil {
				*f = r.finding(audit.AlertAdvisoryEntryMismatch, SectionCapture, "", "advisories or explicit records without a failure-log entry")
				(*f).Repair = &audit.Repair{Action: "redrive"}
			}
			(*f).Example(c.eventID)
			if c.redriven {
				(*f).Repair.Note(c.eventID + ": already re-driven once and still no entry; check the bridge and classify")
				continue
			}
			(*f).Repair.Planned++
			if r.dry {
				continue
			}
			if stopped {
				// Planned, not tried; the log names each, where the
				// finding's examples stop at ten.
				sec.Add("redrive_held_"+name, 1)
				r.h.log.WarnContext(ctx, "reconcile: capture re-drive not tried", "run_id", r.rep.RunID, "event_id", event.Wire(c.eventID), "stream", event.Wire(name), "seq", c.seq)
				continue
			}
			if r.over() {
				r.state.Capture[name] = int64(c.seq - 1)
				return errBudget
			}
			err := r.redrive(ctx, js, name, c)
			switch {
			case err == nil:
				(*f).Repair.Done++
				r.h.log.InfoContext(ctx, "reconcile: capture re-driven", "run_id", r.rep.RunID, "event_id", event.Wire(c.eventID), "stream", event.Wire(name), "seq", c.seq)
			case ctx.Err() != nil:
				// The run ran out: the others would fail the same way.
				r.state.Capture[name] = int64(c.seq - 1)
				return fmt.Errorf("stream %s: redrive %s: %w", name, c.eventID, err)
			case errors.Is(err, context.DeadlineExceeded):
				// Every publish into this stream would wait as long: the
				// NATS user most likely may not publish there. Waiting once
				// per missing entry would spend the budget of the sections
				// after this one. The cursor still moves on: holding it
				// before the first one would make a deployment that grants
				// reconcile no publish permission re-read (and look up the
				// entries of) the same messages every run, and never reach
				// newer ones once they outnumber a run's MaxCaptureMsgs.
				(*f).Repair.Fail(fmt.Errorf("redrive %s: %w (no answer within %v: check the NATS user's permission to publish to the subjects of stream %s, and the stream's health)", c.eventID, err, r.h.cfg.IOTimeout, name))
				(*f).Repair.Note("stream " + name + ": re-drives stopped for this run after one got no answer (likely no permission to publish to the stream's subjects); the entries still missing are counted in this finding and each is logged")
				stopped = true
			default:
				(*f).Repair.Fail(fmt.Errorf("redrive %s: %w", c.eventID, err))
			}
		}
		checked += len(batch)
		if len(batch) > 0 {
			r.state.Capture[name] = int64(batch[len(batch)-1].seq)
		}
		if stop {
			return nil
		}
		if int64(seq-1) > r.state.Capture[name] {
			r.state.Capture[name] = int64(seq - 1) // skipped messages are checked too
		}
	}
	return nil
}

// redrive publishes c again into stream name under IOTimeout. Publishing
// twice is harmless: the copy's Nats-Msg-Id is the same each time, so the
// stream keeps one within its duplicate window, and classify changes
// nothing for an entry that exists.
func (r *run) redrive(ctx context.Context, js jetstream.JetStream, name string, c captured) error {
	ctx, cancel := r.h.ioCtx(ctx)
	defer cancel()
	msg := &nats.Msg{Subject: c.subject, Header: c.header, Data: c.data}
	msg.Header.Set(jetstream.MsgIDHeader, RedrivePrefix+name+"."+fmt.Sprint(c.seq))
	_, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(name))
	return err
}

// parseCaptured reads the event id an advisory or a record stands for.
func parseCaptured(record bool, m *jetstream.RawStreamMsg) (captured, bool) {
	c := captured{seq: m.Sequence, subject: m.Subject, data: m.Data, header: nats.Header{}}
	for k, v := range m.Header {
		c.header[k] = append([]string(nil), v...)
	}
	c.redriven = strings.HasPrefix(m.Header.Get(jetstream.MsgIDHeader), RedrivePrefix)
	if record {
		rec, err := event.ParseRecord(m.Header, m.Data)
		if err != nil {
			return c, false
		}
		c.eventID = event.ID(rec.Meta.Stream, rec.Meta.StreamSeq)
	} else {
		var a struct {
			Type      string `json:"type"`
			Stream    string `json:"stream"`
			StreamSeq uint64 `json:"stream_seq"`
		}
		if err := json.Unmarshal(m.Data, &a); err != nil || a.Stream == "" || a.StreamSeq == 0 ||
			(a.Type != event.AdvisoryMaxDeliver && a.Type != event.AdvisoryTerminated) {
			return c, false
		}
		c.eventID = event.ID(a.Stream, a.StreamSeq)
	}
	id, err := store.EntryID(c.eventID)
	if err != nil {
		return c, false
	}
	c.entryID = id
	return c, true
}
