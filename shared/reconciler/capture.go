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
			msg := &nats.Msg{Subject: c.subject, Header: c.header, Data: c.data}
			msg.Header.Set(jetstream.MsgIDHeader, RedrivePrefix+name+"."+fmt.Sprint(c.seq))
			_, err := askJetStream(ctx, r.h, func(ctx context.Context) (*jetstream.PubAck, error) {
				return js.PublishMsg(ctx, msg, jetstream.WithExpectStream(name))
			})
			if err != nil {
				(*f).Repair.Fail(fmt.Errorf("redrive %s: %w", c.eventID, err))
				continue
			}
			(*f).Repair.Done++
			r.h.log.InfoContext(ctx, "reconcile: capture re-driven", "run_id", r.rep.RunID, "event_id", c.eventID, "stream", name, "seq", c.seq)
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
