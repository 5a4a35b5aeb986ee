package reconciler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Defaults of the acks-without-outcome check (Config.OutcomeTolerance,
// Config.OutcomeMinGap): a few acknowledged tasks without an outcome are
// expected (a redelivered task Once skips is acknowledged again; a death
// recorded just after the hour's last sample falls outside it), a tenth
// of the hour's traffic is not.
const (
	DefaultOutcomeTolerance = 0.1
	DefaultOutcomeMinGap    = 5
)

// acksWithoutOutcome compares, for the last complete hour the traffic
// samples cover, the tasks the work streams' consumers acknowledged (their
// ack floors moved) with the outcomes recorded meanwhile: completions
// (agentkit.Once's records in task-idempotency) and deaths (entries). A
// task acknowledged with neither ran without leaving a trace: an agent
// that swallowed an error and acked, or acks without Once. Such a task
// never reaches the DLQ, so nothing else reports it.
//
// Only the last complete hour is judged, so the alert clears in the hour
// after the agent is fixed; an hour is complete once CaptureGrace has
// passed after it, time for its deaths to become entries.
func (r *run) acksWithoutOutcome(ctx context.Context, sec *audit.Section, js jetstream.JetStream, samples map[string][]store.MetricsSample) error {
	cutoff := r.now().Add(-r.h.cfg.CaptureGrace)
	var hour time.Time
	for _, name := range r.h.cfg.WorkStreams {
		for _, s := range samples[name] {
			h := s.FirstAt.UTC().Truncate(time.Hour)
			if s.LastAt.After(s.FirstAt) && !h.Add(time.Hour).After(cutoff) && h.After(hour) {
				hour = h
			}
		}
	}
	if hour.IsZero() {
		addNote(sec, "no complete hour sampled twice yet: acknowledged tasks not compared with outcomes")
		return nil
	}
	triage, err := r.triageConsumers(ctx, js)
	if err != nil {
		return err
	}
	var from, to time.Time
	var acked, triaged int64
	for _, name := range r.h.cfg.WorkStreams {
		for _, s := range samples[name] {
			if !s.FirstAt.UTC().Truncate(time.Hour).Equal(hour) {
				continue
			}
			if from.IsZero() || s.FirstAt.Before(from) {
				from = s.FirstAt
			}
			if s.LastAt.After(to) {
				to = s.LastAt
			}
			for c, cs := range s.Consumers {
				first, ok := s.FirstAckFloors[c]
				switch {
				case !ok:
				case triage[name+"/"+c]:
					triaged += cs.AckFloor - min(cs.AckFloor, first)
				default:
					acked += cs.AckFloor - min(cs.AckFloor, first)
				}
			}
		}
	}
	completed, err := r.h.store.CountCompletions(ctx, from, to)
	if err != nil {
		return err
	}
	dead, err := r.h.store.Count(ctx, store.Query{CreatedFrom: from, CreatedTo: to})
	if err != nil {
		return err
	}
	sec.Add("hour_acked", acked)
	sec.Add("hour_triage_acked", triaged)
	sec.Add("hour_completed", completed)
	sec.Add("hour_dead", dead)
	gap := acked - completed - dead
	allowed := max(float64(r.h.cfg.OutcomeMinGap), math.Floor(r.h.cfg.OutcomeTolerance*float64(acked)))
	if float64(gap) <= allowed {
		return nil
	}
	f := r.finding(audit.AlertAcksWithoutOutcome, SectionTraffic, "", fmt.Sprintf(
		"%s to %s: %d tasks acknowledged by the consumers of %v, %d outcomes recorded (%d completions, %d dead): %d acknowledged without a completion or a death (an agent that swallows an error and acks, or acks without agentkit.Once)",
		from.Format(time.RFC3339), to.Format(time.RFC3339), acked, r.h.cfg.WorkStreams, completed+dead, completed, dead, gap))
	f.Count = int(gap)
	f.Value, f.Threshold = float64(gap), allowed
	return nil
}

// triageConsumers are the work streams' consumers ("<stream>/<consumer>")
// that receive only triage tasks: a triage agent acknowledges a task once
// it answered, and the answer's outcome is the entry's decision, not a
// completion or a death, so their acknowledgements are left out (counted
// as hour_triage_acked). A consumer that receives triage tasks among
// others cannot be told apart; the tolerance covers its answers.
func (r *run) triageConsumers(ctx context.Context, js jetstream.JetStream) (map[string]bool, error) {
	out := map[string]bool{}
	for _, name := range r.h.cfg.WorkStreams {
		names, err := askJetStream(ctx, r.h, func(ctx context.Context) ([]string, error) {
			str, err := js.Stream(ctx, name)
			if err != nil {
				return nil, err
			}
			var only []string
			lister := str.ListConsumers(ctx)
			for ci := range lister.Info() {
				filters := ci.Config.FilterSubjects
				if len(filters) == 0 {
					filters = []string{ci.Config.FilterSubject}
				}
				if !slices.ContainsFunc(filters, func(f string) bool {
					s, ok := event.DefaultConventions.ParseSubject(f)
					return !ok || s.TaskType != event.TriageTaskType
				}) {
					only = append(only, ci.Name)
				}
			}
			return only, lister.Err()
		})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("consumers of %s: %w", name, err)
		}
		for _, c := range names {
			out[name+"/"+c] = true
		}
	}
	return out, nil
}
