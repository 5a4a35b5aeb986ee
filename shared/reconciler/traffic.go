package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/store"
)

// traffic samples each work stream's last sequence and its consumers' ack
// floors into the hour's metrics (dlq-metrics/{hour}/streams/{stream}) and
// builds the published / completed / duplicates table of the window from the
// stored samples.
func (r *run) traffic(ctx context.Context, sec *audit.Section) error {
	js, err := r.jetStream(ctx, true)
	if err != nil {
		return err
	}
	now := r.now()
	from := now.Add(-r.h.cfg.Window)
	current := map[string]store.MetricsSample{}
	rows := map[string]*audit.StreamTraffic{}
	var errs []error
	for _, name := range r.h.cfg.WorkStreams {
		row := &audit.StreamTraffic{Stream: name, Acked: map[string]int64{}, Pending: map[string]int64{}}
		rows[name] = row
		s, err := askJetStream(ctx, r.h, func(ctx context.Context) (store.MetricsSample, error) { return sample(ctx, js, name, now) })
		if err != nil {
			row.Error = err.Error()
			errs = append(errs, err)
			continue
		}
		current[name] = s
		sec.Add("sampled", 1)
		if !r.dry {
			if err := r.h.store.RecordSample(ctx, now, s); err != nil {
				return err
			}
		}
	}
	samples, err := r.h.store.ReadSamples(ctx, from, now)
	if err != nil {
		return err
	}
	if err := r.acksWithoutOutcome(ctx, sec, js, samples); err != nil {
		return err
	}
	t := &audit.Traffic{From: from, To: now}
	for _, name := range r.h.cfg.WorkStreams {
		row := rows[name]
		cur, ok := current[name]
		if !ok {
			t.Streams = append(t.Streams, *row)
			continue
		}
		row.LastSeq = cur.LastSeq
		// The window starts at the earliest sample in it (the current one
		// when this is the first run): published is what was appended since.
		first := cur
		for _, s := range samples[name] {
			if s.FirstAt.Before(first.FirstAt) {
				first = s
			}
		}
		row.Published = cur.LastSeq - min(cur.LastSeq, first.FirstLastSeq)
		for c, cs := range cur.Consumers {
			start, ok := first.FirstAckFloors[c]
			if !ok {
				start = cs.AckFloor
			}
			row.Acked[c] = cs.AckFloor - min(cs.AckFloor, start)
			row.Pending[c] = cs.NumPending + int64(cs.NumAckPending)
		}
		t.Published += row.Published
		t.Streams = append(t.Streams, *row)
	}
	if t.Completed, err = r.h.store.CountCompletions(ctx, from, now); err != nil {
		return err
	}
	if t.Dead, err = r.h.store.Count(ctx, store.Query{CreatedFrom: from, CreatedTo: now}); err != nil {
		return err
	}
	if lp := r.state.LastPass; lp != nil {
		t.Duplicates = lp.Duplicates
	}
	// Dead counts the deaths of every stream; with one unsampled, Published
	// lacks its messages and the quotient would overstate the rate.
	t.DLQRate = -1
	if len(current) == len(r.h.cfg.WorkStreams) {
		t.DLQRate = store.DeadRate{Dead: t.Dead, Published: t.Published}.Rate()
	}
	r.rep.Traffic = t
	return errors.Join(errs...)
}

// sample reads a stream's state and its consumers' ack floors.
func sample(ctx context.Context, js jetstream.JetStream, name string, now time.Time) (store.MetricsSample, error) {
	str, err := js.Stream(ctx, name)
	if err != nil {
		return store.MetricsSample{}, fmt.Errorf("work stream %s: %w", name, err)
	}
	info := str.CachedInfo()
	s := store.MetricsSample{
		Stream: name, FirstAt: now, LastAt: now, FirstLastSeq: i64(info.State.LastSeq), LastSeq: i64(info.State.LastSeq),
		Messages: i64(info.State.Msgs), FirstAckFloors: map[string]int64{}, Consumers: map[string]store.ConsumerSample{},
	}
	lister := str.ListConsumers(ctx)
	for ci := range lister.Info() {
		s.Consumers[ci.Name] = store.ConsumerSample{
			AckFloor: i64(ci.AckFloor.Stream), Delivered: i64(ci.Delivered.Stream), NumPending: i64(ci.NumPending),
			NumAckPending: ci.NumAckPending, NumRedelivered: ci.NumRedelivered,
		}
		s.FirstAckFloors[ci.Name] = i64(ci.AckFloor.Stream)
	}
	if err := lister.Err(); err != nil {
		return store.MetricsSample{}, fmt.Errorf("consumers of %s: %w", name, err)
	}
	return s, nil
}

// i64 converts a JetStream counter for Firestore, which has no unsigned
// integers (sequences never come near 2^63).
func i64(v uint64) int64 { return int64(min(v, 1<<63-1)) }

// jetStream is the NATS connection of the sections that read streams; without
// one (or, where they audit work streams, without WORK_STREAMS) the section is
// skipped, not failed: a deployment may leave it out.
func (r *run) jetStream(ctx context.Context, workStreams bool) (jetstream.JetStream, error) {
	if workStreams && len(r.h.cfg.WorkStreams) == 0 {
		return nil, fmt.Errorf("%w: WORK_STREAMS is empty", errSkipped)
	}
	if r.h.js == nil {
		return nil, fmt.Errorf("%w: no NATS connection", errSkipped)
	}
	js, err := r.h.js(ctx)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	return js, nil
}

// eachStream runs check on each of the streams names. One stream's failure
// or spent budget does not keep the next from its turn (each checks the
// budget itself): the errors are joined, and errBudget is returned when a
// stream stopped at the budget and none failed.
func eachStream(names []string, check func(name string) error) error {
	partial := false
	var errs []error
	for _, name := range names {
		err := check(name)
		switch {
		case errors.Is(err, errBudget):
			partial = true
		case err != nil:
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if partial {
		return errBudget
	}
	return nil
}

// stream opens stream name for a section that reads it. A stream that does
// not exist is counted and noted on the section, and stream returns nil
// without an error: there is nothing of it to audit, which is not a failure.
func (r *run) stream(ctx context.Context, sec *audit.Section, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	str, err := askJetStream(ctx, r.h, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, name) })
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		sec.Add("streams_missing", 1)
		addNote(sec, "stream "+name+" does not exist")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return str, nil
}
