package reconciler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
)

// SectionStreams reports the capture streams' fill and the bridge's lag, and
// trims what the bridge forwarded and the capture audit checked.
const SectionStreams = "capture_streams"

// DefaultCaptureFillAlert is the fill (of a capture stream's message or byte
// limit, whichever is nearer) at which capture_stream_filling alerts: early
// enough to act before a full stream refuses agentkit's copies.
const DefaultCaptureFillAlert = 0.8

// captureStreams looks at each capture stream. The streams refuse new
// messages when full (bridge.Ensure), so what they hold must leave once it
// is safe: a message the bridge acknowledged (its event confirmed by
// Pub/Sub) and the capture audit got past (it has its entry, or was
// re-driven) is purged. What is left is the bridge's backlog plus what the
// audit has not reached, and its fill alerts at CaptureFillAlert.
func (r *run) captureStreams(ctx context.Context, sec *audit.Section) error {
	js, err := r.jetStream(ctx, false)
	if err != nil {
		return err
	}
	var f *audit.Finding
	return eachStream([]string{r.h.cfg.AdvisoryStream, r.h.cfg.RecordStream}, func(name string) error {
		return r.captureStreamOf(ctx, sec, js, name, &f)
	})
}

func (r *run) captureStreamOf(ctx context.Context, sec *audit.Section, js jetstream.JetStream, name string, f **audit.Finding) error {
	str, err := r.stream(ctx, sec, js, name)
	if err != nil || str == nil {
		return err
	}
	ci, err := askJetStream(ctx, r.h, func(ctx context.Context) (*jetstream.ConsumerInfo, error) {
		c, err := str.Consumer(ctx, r.h.cfg.BridgeConsumer)
		if err != nil {
			return nil, err
		}
		return c.CachedInfo(), nil
	})
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		addNote(sec, fmt.Sprintf("stream %s has no bridge consumer %s: nothing is trimmed", name, r.h.cfg.BridgeConsumer))
	case err != nil:
		return fmt.Errorf("stream %s: bridge consumer %s: %w", name, r.h.cfg.BridgeConsumer, err)
	default:
		r.bridgeLag(ctx, sec, str, name, ci)
		if err := r.trim(ctx, sec, str, name, ci.AckFloor.Stream); err != nil {
			return err
		}
	}
	info, err := askJetStream(ctx, r.h, func(ctx context.Context) (*jetstream.StreamInfo, error) { return str.Info(ctx) })
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	fill := fillOf(info)
	sec.Add("fill_percent_"+name, int64(math.Round(fill*100)))
	sec.Add("messages_"+name, i64(info.State.Msgs))
	if info.Config.Discard != jetstream.DiscardNew {
		addNote(sec, "stream "+name+" discards its oldest message when full (a silent loss): the bridge moves it to discard new when it starts, or run nats stream edit "+name+" --discard new")
	}
	if fill >= r.h.cfg.CaptureFillAlert {
		if *f == nil {
			*f = r.finding(audit.AlertCaptureStreamFilling, SectionStreams, "", "")
		}
		(*f).Example(fmt.Sprintf("%s: %.0f %% full (%d of %d messages, %d of %d bytes)", name, fill*100,
			info.State.Msgs, info.Config.MaxMsgs, info.State.Bytes, info.Config.MaxBytes))
		(*f).Message = fmt.Sprintf("capture streams at least %.0f %% full: when full they refuse new dead messages (agentkit NAKs and keeps the task; an advisory is lost). Check the bridge and its lag, and reconcile's trim of what was forwarded",
			r.h.cfg.CaptureFillAlert*100)
	}
	return nil
}

// bridgeLag adds the bridge's backlog on the stream to the section: the
// messages it has not acknowledged, and how old the oldest of them is.
func (r *run) bridgeLag(ctx context.Context, sec *audit.Section, str jetstream.Stream, name string, ci *jetstream.ConsumerInfo) {
	backlog := i64(ci.NumPending) + int64(ci.NumAckPending)
	sec.Add("bridge_backlog_"+name, backlog)
	if backlog == 0 {
		return
	}
	m, err := askJetStream(ctx, r.h, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return str.GetMsg(ctx, ci.AckFloor.Stream+1)
	})
	if err == nil {
		sec.Add("bridge_oldest_unforwarded_seconds_"+name, int64(r.now().Sub(m.Time)/time.Second))
	}
}

// trim purges the stream's messages up to the lower of the bridge's ack
// floor and the capture audit's cursor. Safe to repeat and to run
// concurrently: a purge below the first sequence removes nothing, and
// neither bound moves back.
func (r *run) trim(ctx context.Context, sec *audit.Section, str jetstream.Stream, name string, ackFloor uint64) error {
	upto := min(uint64(max(r.state.Capture[name], 0)), ackFloor)
	if r.dry || upto < str.CachedInfo().State.FirstSeq {
		return nil
	}
	before := str.CachedInfo().State.Msgs
	_, err := askJetStream(ctx, r.h, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, str.Purge(ctx, jetstream.WithPurgeSequence(upto+1))
	})
	if err != nil {
		sec.Add("trim_failed_"+name, 1)
		addNote(sec, fmt.Sprintf("stream %s not trimmed (the NATS user needs $JS.API.STREAM.PURGE.%s): %v", name, name, err))
		return nil
	}
	info, err := askJetStream(ctx, r.h, func(ctx context.Context) (*jetstream.StreamInfo, error) { return str.Info(ctx) })
	if err == nil && before >= info.State.Msgs {
		sec.Add("trimmed_"+name, i64(before-info.State.Msgs))
	}
	return nil
}

// fillOf is how full a stream is: the larger of its message count and byte
// size over their limits (0 for an unlimited kind).
func fillOf(info *jetstream.StreamInfo) float64 {
	fill := 0.0
	if m := info.Config.MaxMsgs; m > 0 {
		fill = float64(info.State.Msgs) / float64(m)
	}
	if b := info.Config.MaxBytes; b > 0 {
		fill = max(fill, float64(info.State.Bytes)/float64(b))
	}
	return fill
}
