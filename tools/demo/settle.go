package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Watching the run settle: the entries, what was captured, the progress
// until every task has an end, reconcile, and what the agents executed.

// entries reads this run's failure-log entries (created since the start).
func (d *demo) entries(ctx context.Context) ([]*store.Entry, error) {
	q := store.Query{CreatedFrom: d.start.Add(-time.Second), Order: store.OldestFirst, View: store.ScanView, Limit: 500}
	var out []*store.Entry
	for {
		p, err := d.st.Entries(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("read entries: %w", err)
		}
		for _, e := range p.Entries {
			if e.Stream == workStream {
				out = append(out, e)
			}
		}
		if p.Next.IsZero() {
			return out, nil
		}
		q.After = p.Next
	}
}

// readCaptured reads the advisories and DLQ records of this run: the dead
// messages the bridge must turn into entries.
func (d *demo) readCaptured(ctx context.Context) error {
	for _, name := range []string{event.DefaultAdvisoryStream, event.DefaultRecordStream} {
		s, err := d.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		for seq := d.cursor[name] + 1; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				d.cursor[name] = seq
				continue
			}
			if err != nil {
				return fmt.Errorf("read %s #%d: %w", name, seq, err)
			}
			d.cursor[name] = seq
			if strings.HasPrefix(m.Header.Get(nats.MsgIdHdr), reconciler.RedrivePrefix) {
				continue // a copy reconcile re-drove, not another dead message
			}
			if name == event.DefaultRecordStream {
				if id := m.Header.Get(nats.MsgIdHdr); strings.HasPrefix(id, workStream+".") {
					d.captured[id] = true
				}
				continue
			}
			var adv struct {
				Stream    string `json:"stream"`
				StreamSeq uint64 `json:"stream_seq"`
			}
			if json.Unmarshal(m.Data, &adv) == nil && adv.Stream == workStream {
				d.captured[fmt.Sprintf("%s.%d", adv.Stream, adv.StreamSeq)] = true
			}
		}
	}
	return nil
}

// awaitsTriage reports whether e waits for the triage agent's answer. A
// dead triage task is escalated to the humans its notification reaches,
// never to another triage task: it ends its chain.
func awaitsTriage(e *store.Entry) bool {
	return e.Status.AsksTriage() && e.TaskType != event.TriageTaskType
}

// progress is one look at the pipeline.
type progress struct {
	entries, replays, recovered, pending, ended, held, triage int
	completions                                               int64
}

func (d *demo) look(ctx context.Context) (progress, error) {
	var p progress
	entries, err := d.entries(ctx)
	if err != nil {
		return p, err
	}
	if err := d.readCaptured(ctx); err != nil {
		return p, err
	}
	if p.completions, err = d.st.CountCompletions(ctx, d.start.Add(-time.Second), time.Now().Add(time.Minute)); err != nil {
		return p, err
	}
	children := map[string]bool{}
	for _, e := range entries {
		if e.ReplayOf != "" {
			children[e.ReplayOf] = true
		}
	}
	var replayed []*store.Entry
	for _, e := range entries {
		p.entries++
		p.replays += e.Replays
		switch {
		case e.Status == store.Recovered:
			p.recovered++
		case awaitsTriage(e):
			p.triage++
			p.pending++
		case e.Status.NeedsHuman() || e.Status.Settled():
			// Ends its chain without a replay pending: waits for a human
			// (quarantined: no triage task), or a decision taken.
			p.ended++
		case e.Status == store.Replayed && !children[e.ID]:
			replayed = append(replayed, e)
		case e.Status == store.Replayed:
		case e.Status == store.Held:
			p.held++
			p.pending++
		default:
			p.pending++ // scheduled, replaying, held
		}
	}
	if len(replayed) > 0 {
		done, err := d.st.Completions(ctx, replayed)
		if err != nil {
			return p, err
		}
		for _, e := range replayed {
			if !done[e.ID].Done {
				p.pending++ // its replay is still being worked on
			}
		}
	}
	return p, nil
}

// waitSettled prints progress until every task completed or ended its
// chain in a human's hands, and the bridge turned every captured message
// into an entry. It returns how many tasks had not settled at the timeout.
func (d *demo) waitSettled(ctx context.Context, total int) (int, error) {
	deadline := time.Now().Add(d.o.timeout)
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
		// Classify and replay publish their notifications (and triage
		// tasks) at once; this flush stands for reconcile's schedule, and
		// counts what it had to catch up on.
		if res, err := d.notify.Flush(ctx); err == nil {
			d.caughtUp += res.Published
		}
		p, err := d.look(ctx)
		if err != nil {
			return 0, err
		}
		settled := int(p.completions) + p.ended
		held := ""
		if p.held > 0 {
			held = fmt.Sprintf("  (held by an open tenant breaker: %d)", p.held)
		}
		d.logf("published %d  completed %d  dead %d  entries %d  replays %d  recovered %d  awaiting triage %d  ended (discarded, quarantined) %d  in flight %d%s",
			total, p.completions, len(d.captured), p.entries, p.replays, p.recovered, p.triage, p.ended, p.pending-p.triage, held)
		if settled >= total && p.pending == 0 && len(d.captured) == p.entries {
			return 0, nil
		}
		if time.Now().After(deadline) {
			d.logf("not settled after %s: %d of %d tasks settled, %d entries in flight", d.o.timeout, settled, total, p.pending)
			return max(total-settled, p.pending, 1), nil
		}
	}
}

// reconcile runs the audit in-process, as dlqctl audit does. The final run
// uses short grace periods: the demo waited for the pipeline to settle, so
// nothing is in flight any more.
func (d *demo) reconcile(ctx context.Context, final bool) (*audit.Report, error) {
	cfg := reconciler.Config{WorkStreams: []string{workStream}, TimeBudget: time.Minute}
	if final {
		cfg.Grace, cfg.CaptureGrace = 3*time.Second, 3*time.Second
	}
	log := obs.NewLogger(io.Discard)
	if f, err := os.OpenFile(filepath.Join(d.logDir, "demo-reconcile.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		defer f.Close()
		log = obs.NewLogger(f, obs.WithComponent("reconcile"))
	}
	h := reconciler.New(cfg, reconciler.Deps{Logger: log, Store: d.st, Tasks: d.sched, Notify: d.notify,
		JetStream: func(context.Context) (jetstream.JetStream, error) { return d.js, nil }})
	rep, err := h.Run(context.WithoutCancel(ctx), false)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	if final {
		var repaired []string
		for _, f := range rep.Findings {
			if f.Repair != nil && f.Repair.Done > 0 {
				repaired = append(repaired, fmt.Sprintf("%s %d", f.Name, f.Repair.Done))
			}
		}
		d.logf("reconcile %s: alerts %v, repairs %s", rep.RunID, rep.Alerts, orDash(strings.Join(repaired, ", ")))
	}
	return rep, nil
}

// executions counts, per task id, how often an agent ran the task's work
// (examples/agent logs outcome "done" when agentkit.Once ran it), the
// steps each run skipped because its replay said the failed attempt had
// done them (Jsdlq-Completed-Steps), and the deliveries that did not
// complete the work (a NAK after a failure, a terminate); redelivered are
// the tasks a delivery after the first settled, or that met their own
// claim in progress or lost it.
func (d *demo) executions() (done, skipped, wasted map[string]int, redelivered map[string]bool, err error) {
	done, skipped, wasted, redelivered = map[string]int{}, map[string]int{}, map[string]int{}, map[string]bool{}
	for _, name := range fleet {
		f, err := os.Open(d.agentLog(name))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct {
				Message      string `json:"message"`
				Outcome      string `json:"outcome"`
				TaskID       string `json:"task_id"`
				StepsSkipped int    `json:"steps_skipped"`
				Delivery     int    `json:"delivery"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Message != "task settled" || !strings.HasPrefix(l.TaskID, "demo-"+d.run+"-") {
				continue
			}
			switch l.Outcome {
			case "done":
				done[l.TaskID]++
				skipped[l.TaskID] += l.StepsSkipped
			case "failed_nak", "terminated":
				wasted[l.TaskID]++
			}
			if l.Delivery > 1 || l.Outcome == "in_progress_elsewhere" || l.Outcome == "claim_lost" {
				redelivered[l.TaskID] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return done, skipped, wasted, redelivered, nil
}
