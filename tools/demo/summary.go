package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// entryRow counts failure-log entries of one category.
type entryRow struct {
	Entries, Replays, Recovered, Escalated, OtherHuman int
}

// taskRow counts dead tasks (replay chains) by the category of their first
// death. Recovered includes HumanRecovered: chains whose replay a triage
// agent's approval sent.
type taskRow struct {
	Dead, Recovered, Unresolved, HumanRecovered int
}

// decision is a triage agent's answer to one entry.
type decision struct {
	Entry   string
	Discard bool
	After   time.Duration // from the entry's creation (its death)
}

// summary is what the demo reports, computed from Firestore and the agents'
// logs only: the pipeline's own account, not the plan's.
type summary struct {
	Run                string
	Tasks              int
	Completions        int64
	Entries            map[string]*entryRow
	DeadTasks          map[string]*taskRow
	Paths              map[string]int
	DeadTotal          int
	Resolved           int
	DuplicatesExecuted int            // side effects run more than once for one idempotency key
	Executions         map[string]int // task id -> times its work ran
	PipelineDuplicates int64          // reconcile's traffic table (dead tasks found completed at replay)
	Captured           int            // distinct event ids in the advisory and record streams
	EntryCount         int
	Lost               []string // captured, no entry
	Uncaptured         []string // entry, nothing captured (should not exist)
	Published          int64    // reconcile traffic: appended to the work stream (replays included)
	Unsettled          int
	// Decisions are the triage agent's answers (entries that needed one).
	Decisions []decision
	// StepsSkipped: steps replays did not run again because their failed
	// attempt had completed them; ReplaysSkipping: runs that skipped any.
	StepsSkipped, ReplaysSkipping int
	// NotificationsCaughtUp: notifications the scheduled flush published
	// because classify and replay had not.
	NotificationsCaughtUp int
	// Predictions compare the learnable classes across the two phases.
	Predictions *predictionFigures
	// LongTasks are the tasks whose work outlasts their ack deadline;
	// LongRedelivered those the server redelivered while an agent worked
	// on them (agentkit's keep-alive failed them).
	LongTasks, LongRedelivered int
	// Resolution are the product's resolution figures next to the demo's
	// count of them.
	Resolution *resolution
}

// triageDecision is the triage agent's answer in e's history, if any.
func triageDecision(e *store.Entry) (decision, bool) {
	for _, tr := range e.History {
		if strings.HasPrefix(tr.By, agentkit.TriageActor("")) {
			return decision{Entry: e.ID, Discard: tr.To == string(store.Discarded), After: tr.At.Sub(e.CreatedAt)}, true
		}
	}
	return decision{}, false
}

// rootPath is the path into the DLQ of a chain's first death.
func rootPath(e *store.Entry) string {
	switch {
	case e.ReasonCode == "context_window_overflow":
		return pathContext
	case e.ReasonCode == "consumer_filter_rejection":
		return pathFilter
	case e.Kind == "max_deliver":
		return pathMaxDeliver
	}
	return pathTerminate
}

// summarize counts entries and chains. captured are the event ids the
// capture streams hold for the demo's dead messages.
func summarize(entries []*store.Entry, captured map[string]bool) summary {
	s := summary{Entries: map[string]*entryRow{}, DeadTasks: map[string]*taskRow{}, Paths: map[string]int{}, EntryCount: len(entries), Captured: len(captured)}
	chains := map[string][]*store.Entry{}
	ids := map[string]bool{}
	for _, e := range entries {
		ids[e.EventID] = true
		r := s.Entries[e.Category]
		if r == nil {
			r = &entryRow{}
			s.Entries[e.Category] = r
		}
		r.Entries++
		r.Replays += e.Replays
		switch e.Status {
		case store.Recovered:
			r.Recovered++
		case store.Escalated:
			r.Escalated++
		case store.Quarantined, store.AwaitingApproval, store.Held:
			r.OtherHuman++
		}
		root := e.RootID
		if root == "" {
			root = e.ID
		}
		chains[root] = append(chains[root], e)
		if d, ok := triageDecision(e); ok {
			s.Decisions = append(s.Decisions, d)
		}
	}
	for root, chain := range chains {
		first := chain[0]
		for _, e := range chain {
			if e.ID == root {
				first = e
			}
		}
		r := s.DeadTasks[first.Category]
		if r == nil {
			r = &taskRow{}
			s.DeadTasks[first.Category] = r
		}
		r.Dead++
		s.DeadTotal++
		s.Paths[rootPath(first)]++
		if slices.ContainsFunc(chain, func(e *store.Entry) bool { return e.Status == store.Recovered }) {
			r.Recovered++
			s.Resolved++
			if slices.ContainsFunc(chain, func(e *store.Entry) bool { d, ok := triageDecision(e); return ok && !d.Discard }) {
				r.HumanRecovered++
			}
		} else {
			r.Unresolved++
		}
	}
	for id := range captured {
		if !ids[id] {
			s.Lost = append(s.Lost, id)
		}
	}
	for id := range ids {
		if !captured[id] {
			s.Uncaptured = append(s.Uncaptured, id)
		}
	}
	slices.Sort(s.Lost)
	slices.Sort(s.Uncaptured)
	return s
}

// countSkipped adds the steps each task's runs skipped.
func (s *summary) countSkipped(skipped map[string]int) {
	for _, n := range skipped {
		s.StepsSkipped += n
		if n > 0 {
			s.ReplaysSkipping++
		}
	}
}

// percentile is the nearest-rank p-th percentile of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(float64(len(ds))*p/100+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func (s *summary) countExecutions(done map[string]int) {
	s.Executions = done
	for _, n := range done {
		if n > 1 {
			s.DuplicatesExecuted += n - 1
		}
	}
}

// countLong counts the long tasks of tasks and those redelivered mid-work.
func (s *summary) countLong(tasks []task, redelivered map[string]bool) {
	for _, t := range tasks {
		if t.WorkTime > 0 {
			s.LongTasks++
			if redelivered[t.ID] {
				s.LongRedelivered++
			}
		}
	}
}

// ok is the demo's verdict: nothing executed twice, no long task
// redelivered mid-work, nothing lost, and the predictions halved the
// learnable classes' dead tasks.
func (s summary) ok() bool {
	return s.DuplicatesExecuted == 0 && s.LongRedelivered == 0 && len(s.Lost) == 0 && len(s.Uncaptured) == 0 && s.Captured == s.EntryCount && s.Unsettled == 0 &&
		(s.Predictions == nil || s.Predictions.ok()) && (s.Resolution == nil || s.Resolution.agrees())
}

// field are the field figures' resolution rates per category
// (docs/SCALING.md, "What one dead message causes").
var field = map[string]string{catTransient: "89 %", catConditional: "62 %", catPermanent: "0 %"}

// percent is n of d as a percentage with decimals digits after the point,
// "-" when d is zero.
func percent(n, d, decimals int) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f %%", decimals, 100*float64(n)/float64(d))
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "\n== jsdlq demo summary (run %s), read back from Firestore ==\n\n", s.Run)
	fmt.Fprintf(w, "tasks published %d; work completed %d (task-idempotency records); dead-lettered tasks %d (%s)\n",
		s.Tasks, s.Completions, s.DeadTotal, percent(s.DeadTotal, s.Tasks, 1))
	if s.Published > 0 {
		fmt.Fprintf(w, "work stream: %d messages appended during the run (tasks and replays, from reconcile's stream samples)\n", s.Published)
	}
	fmt.Fprintln(w)
	cats := slices.Sorted(maps.Keys(s.DeadTasks))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEAD TASKS BY CATEGORY\ttasks\tshare\trecovered\tof which after a triage approval\tunresolved\tauto-resolved\tfield reports")
	human := 0
	for _, c := range cats {
		r := s.DeadTasks[c]
		human += r.HumanRecovered
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", c, r.Dead, percent(r.Dead, s.DeadTotal, 1), r.Recovered, r.HumanRecovered, r.Unresolved,
			percent(r.Recovered-r.HumanRecovered, r.Dead, 1), orDash(field[c]))
	}
	fmt.Fprintf(tw, "all\t%d\t\t%d\t%d\t%d\t%s\t81 %% *\n", s.DeadTotal, s.Resolved, human, s.DeadTotal-s.Resolved, percent(s.Resolved-human, s.DeadTotal, 1))
	tw.Flush()
	fmt.Fprintln(w, "  * the field reports state 81 % overall; their own category figures give 61 % x 89 % + 24.6 % x 62 % = 69.5 %")

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAILURE-LOG ENTRIES BY CATEGORY\tentries\treplays\trecovered\tescalated\tquarantined/awaiting")
	var tot entryRow
	for _, c := range slices.Sorted(maps.Keys(s.Entries)) {
		r := s.Entries[c]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", c, r.Entries, r.Replays, r.Recovered, r.Escalated, r.OtherHuman)
		tot.Entries += r.Entries
		tot.Replays += r.Replays
		tot.Recovered += r.Recovered
		tot.Escalated += r.Escalated
		tot.OtherHuman += r.OtherHuman
	}
	fmt.Fprintf(tw, "all\t%d\t%d\t%d\t%d\t%d\n", tot.Entries, tot.Replays, tot.Recovered, tot.Escalated, tot.OtherHuman)
	tw.Flush()

	var paths []string
	for _, p := range []string{pathMaxDeliver, pathTerminate, pathContext, pathFilter} {
		paths = append(paths, fmt.Sprintf("%s %d (%s)", p, s.Paths[p], percent(s.Paths[p], s.DeadTotal, 1)))
	}
	fmt.Fprintf(w, "\npaths into the DLQ: %s\n", strings.Join(paths, ", "))
	fmt.Fprintf(w, "  (field reports: max deliveries 61 %%, explicit terminate 22 %%, context overflow 14 %%, consumer filter rejection 3 %%)\n\n")

	if s.Predictions != nil {
		s.Predictions.print(w)
	}
	s.printDecisions(w)
	if s.Resolution != nil {
		s.Resolution.print(w)
	}
	fmt.Fprintf(w, "completed steps: %d replays skipped %d steps their failed attempt had completed (Jsdlq-Completed-Steps)\n\n",
		s.ReplaysSkipping, s.StepsSkipped)

	fmt.Fprintln(w, "exactly once, nothing lost")
	fmt.Fprintf(w, "  duplicates executed (work run twice for one idempotency key, from the agents' logs): %d\n", s.DuplicatesExecuted)
	fmt.Fprintf(w, "  tasks working %s, %d× their ack deadline (kept alive by agentkit): %d; redelivered mid-work: %d\n",
		longWork, longWork/ackDeadline, s.LongTasks, s.LongRedelivered)
	fmt.Fprintf(w, "  dead tasks found already completed at replay (reconcile's duplicates): %d\n", s.PipelineDuplicates)
	fmt.Fprintf(w, "  dead messages captured (advisories + DLQ records, distinct ids): %d; failure-log entries: %d; lost: %d\n",
		s.Captured, s.EntryCount, len(s.Lost))
	if len(s.Lost) > 0 {
		fmt.Fprintf(w, "  LOST (captured, no entry): %s\n", strings.Join(s.Lost, " "))
	}
	if len(s.Uncaptured) > 0 {
		fmt.Fprintf(w, "  entries without a captured message: %s\n", strings.Join(s.Uncaptured, " "))
	}
	if s.Unsettled > 0 {
		fmt.Fprintf(w, "  NOT SETTLED when the demo stopped waiting: %d tasks\n", s.Unsettled)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printDecisions reports the triage agent's answers and the time from an
// entry's death to its decision.
func (s summary) printDecisions(w io.Writer) {
	var approved, discarded int
	var after []time.Duration
	for _, d := range s.Decisions {
		if d.Discard {
			discarded++
		} else {
			approved++
		}
		after = append(after, d.After)
	}
	slices.Sort(after)
	fmt.Fprintf(w, "human decisions (the triage agent %q, through agentkit and the console's triage endpoint): %d entries needed one; approved/replayed %d, discarded %d\n",
		event.DefaultTriageAgent, len(s.Decisions), approved, discarded)
	if len(after) > 0 {
		fmt.Fprintf(w, "  time from dead to decision: median %s, p95 %s (field: a median of 4.2 hours with a human triager)\n",
			percentile(after, 50).Round(100*time.Millisecond), percentile(after, 95).Round(100*time.Millisecond))
	}
	fmt.Fprintf(w, "  notifications the scheduled flush had to publish (classify and replay publish theirs at once): %d\n\n", s.NotificationsCaughtUp)
}
