package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// Redrive's actions. Every other entry it meets is left alone.
const (
	// actApprove: an entry waiting for a human (operator.Approvable). The
	// approval answers the policy; the replay still meets the idempotency
	// record and the breaker.
	actApprove = "approve"
	// actRunNow: a scheduled entry's task runs now (operator.ReplayNow);
	// the replay still meets all three gates.
	actRunNow = "run-now"
)

// Why an entry is left alone.
const (
	leaveHeld     = "held"     // its breaker releases it, not redrive
	leaveExcluded = "excluded" // its category needs an explicit flag
	leaveNothing  = "nothing"  // nothing to do in its status
)

// optIn are the categories a redrive includes only when asked by name, each
// with its flag: approving them unchanged in bulk is rarely right (a
// governance denial, a payload known to be broken, a task whose side effects
// may have happened).
var optIn = []struct {
	category triage.Category
	flag     string
}{
	{triage.Governance, "include-governance"},
	{triage.Poison, "include-poison"},
	{triage.UnknownCommitState, "include-unknown-commit-state"},
}

// step is what redrive does with one entry: an action, or why it leaves it
// alone.
type step struct{ action, leave string }

// step decides for an entry as listed. A held entry is never released by a
// redrive: an open breaker holds a replay whoever asked, and only its own
// override (dlqctl breaker probe|close) or reconcile, once the breaker
// admits, lets it go.
func (cp *checkpoint) step(e *store.Entry) step {
	if e.Status == store.Held {
		return step{leave: leaveHeld}
	}
	for _, o := range optIn {
		if e.Category == string(o.category) && !slices.Contains(cp.Include, e.Category) {
			return step{leave: leaveExcluded}
		}
	}
	switch {
	case slices.Contains(operator.Approvable, e.Status):
		return step{action: actApprove}
	case e.Status == store.Scheduled:
		return step{action: actRunNow}
	}
	return step{leave: leaveNothing}
}

// partialError ends a redrive that did not do everything (exit 5).
type partialError struct{ msg string }

func (e partialError) Error() string { return e.msg }
func (partialError) ExitCode() int   { return exitPartial }

// parseRate reads "5/s", "5", "300/m".
func parseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 {
		return 0, usagef("--rate %q: want a positive number per second such as 5/s", s)
	}
	switch unit {
	case "", "s":
	case "m", "min":
		n /= 60
	default:
		return 0, usagef("--rate %q: unit must be /s or /m", s)
	}
	return n, nil
}

// bucket is a token bucket of one token: at most rate actions per second,
// no bursts.
type bucket struct {
	interval time.Duration
	next     time.Time
}

func (b *bucket) wait(ctx context.Context) error {
	now := time.Now()
	if b.next.After(now) {
		t := time.NewTimer(b.next.Sub(now))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now = b.next
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.next = now.Add(b.interval)
	return nil
}

type filterList []string

func (f *filterList) String() string     { return strings.Join(*f, ",") }
func (f *filterList) Set(s string) error { *f = append(*f, s); return nil }

func (a *app) cmdRedrive(ctx context.Context, args []string) error {
	fs := newFlags("redrive")
	var filters filterList
	fs.Var(&filters, "filter", "K=V[,K=V…]: tenant, status, category, reason, agent, since, until (repeatable)")
	rateS := fs.String("rate", "", "actions per second, e.g. 5/s (required)")
	dry := fs.Bool("dry-run", false, "print the plan; change nothing")
	yes := fs.Bool("yes", false, "run without asking (scripts)")
	cpPath := fs.String("checkpoint", "", "checkpoint file (default dlqctl-redrive-<time>.json)")
	resume := fs.String("resume", "", "continue the redrive saved in this checkpoint")
	by := fs.String("by", "", "who acts (default DLQCTL_ACTOR or dlqctl:$USER)")
	include := map[string]*bool{}
	for _, o := range optIn {
		include[string(o.category)] = fs.Bool(o.flag, false, "include "+string(o.category)+" entries")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("redrive takes no arguments (got %q)", pos)
	}
	var included []string
	for _, o := range optIn {
		if *include[string(o.category)] {
			included = append(included, string(o.category))
		}
	}
	var cp *checkpoint
	path := *cpPath
	if *resume != "" {
		if len(filters) > 0 || len(included) > 0 || *cpPath != "" {
			return usagef("--resume takes the filter, the --include-* flags and the file from the checkpoint; drop --filter, --include-* and --checkpoint")
		}
		if cp, err = loadCheckpoint(*resume); err != nil {
			return err
		}
		if cp.Complete {
			fmt.Fprintf(a.stdout, "redrive in %s is complete: %s\n", *resume, cp.summary())
			return nil
		}
		if cp.Scope != a.scope {
			return usagef("the checkpoint was made by a caller limited to tenant %q; this caller is limited to %q", cp.Scope, a.scope)
		}
		path = *resume
		if *rateS != "" {
			if cp.Rate, err = parseRate(*rateS); err != nil {
				return err
			}
		}
	} else {
		if len(filters) == 0 {
			return usagef("redrive needs --filter (a bulk replay of everything is not a default)")
		}
		if *rateS == "" {
			return usagef("redrive needs --rate N/s")
		}
		rate, err := parseRate(*rateS)
		if err != nil {
			return err
		}
		var f filter
		for _, group := range filters {
			for _, kv := range strings.Split(group, ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || v == "" {
					return usagef("--filter %q: want K=V", kv)
				}
				if err := f.set(strings.TrimSpace(k), strings.TrimSpace(v), a.clock()); err != nil {
					return err
				}
			}
		}
		if f, err = a.scoped(f); err != nil {
			return err
		}
		now := a.clock()
		cp = &checkpoint{Schema: checkpointSchema, Filter: f, Include: included, Rate: rate, Scope: a.scope, By: a.actor(*by), StartedAt: now}
		if path == "" {
			path = "dlqctl-redrive-" + now.Format("20060102T150405Z") + ".json"
		}
	}
	if !*dry && !*yes && !a.stdinIsTTY() {
		return usagef("redrive asks for confirmation and stdin is not a terminal: check the plan with --dry-run, then run it with --yes")
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	p, err := a.plan(ctx, st, cp)
	if err != nil {
		return err
	}
	p.print(a.stdout, cp, *resume != "")
	if *dry {
		fmt.Fprintln(a.stdout, "dry run: nothing changed")
		return nil
	}
	if p.acts() == 0 && cp.Pending == nil && *resume == "" {
		fmt.Fprintln(a.stdout, "nothing to do: no entry would be acted on")
		return nil
	}
	if !*yes {
		ok, err := a.confirm(fmt.Sprintf("act on %d entries at %.3g/s? [y/N] ", p.acts(), cp.Rate))
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("redrive not confirmed; nothing changed")
		}
	}
	op, err := a.operator(ctx, true)
	if err != nil {
		return err
	}
	if cp.Total == 0 {
		cp.Total = int64(p.Matched)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	w := &checkpointFile{path: path}
	if err := w.save(cp); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "redrive %s at %.3g/s; checkpoint %s\n", cp.Filter, cp.Rate, path)
	return a.redrive(ctx, st, op, cp, w)
}

// confirm asks a yes/no question on stderr and reads the answer from stdin.
func (a *app) confirm(question string) (bool, error) {
	fmt.Fprint(a.stderr, question)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(a.stderr)
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// cursorOf is an entry's position in the redrive's order (newest first).
func cursorOf(e *store.Entry) store.Cursor { return store.Cursor{At: e.CreatedAt, ID: e.ID} }

func (a *app) redrive(ctx context.Context, st *store.Store, op *operator.Operator, cp *checkpoint, w *checkpointFile) error {
	b := &bucket{interval: time.Duration(float64(time.Second) / cp.Rate)}
	prog := newProgress(a.stderr, a.stderrIsTTY(), cp.Total)
	prog.show(cp)
	interrupted := func() error {
		cp.UpdatedAt = a.clock()
		if err := w.save(cp); err != nil {
			return err
		}
		prog.finish(cp)
		resume := "dlqctl redrive --resume " + w.path
		if a.scope != "" {
			resume = fmt.Sprintf("dlqctl --tenant %s redrive --resume %s", a.scope, w.path)
		}
		return partialError{fmt.Sprintf("redrive interrupted after %d of %d entries (%s); checkpoint saved\nresume with: %s",
			cp.Seen, cp.Total, cp.summary(), resume)}
	}
	// The actions run to their end even when Ctrl-C arrives meanwhile, and
	// so do the reads that feed them.
	actx := context.WithoutCancel(ctx)
	if cp.Pending != nil {
		if err := a.settlePending(actx, st, op, cp); err != nil {
			return err
		}
		cp.UpdatedAt = a.clock()
		if err := w.save(cp); err != nil {
			return err
		}
		prog.show(cp)
	}
	q := cp.Filter.query(store.ListView)
	q.Limit = 100
	for {
		if ctx.Err() != nil {
			return interrupted()
		}
		q.After = cp.Cursor
		page, err := st.Entries(actx, q)
		if err != nil {
			return err
		}
		for _, e := range page.Entries {
			s := cp.step(e)
			if s.action == "" {
				cp.LeftAlone++
				cp.Seen++
				cp.Cursor = cursorOf(e)
				continue
			}
			if err := b.wait(ctx); err != nil {
				return interrupted()
			}
			// Write-ahead: the checkpoint names the entry before the
			// action, so a crash in between leaves it decidable.
			cp.Pending = &pending{At: cursorOf(e), Action: s.action, UpdatedAt: e.UpdatedAt}
			cp.UpdatedAt = a.clock()
			if err := w.save(cp); err != nil {
				return err
			}
			if a.beforeRedriveAct != nil {
				a.beforeRedriveAct(cp.Seen)
			}
			cp.count(s.action, a.act(actx, op, cp, e.ID, s.action), e.ID, prog)
			cp.Pending = nil
			cp.Cursor = cursorOf(e)
			cp.Seen++
			prog.show(cp)
			if a.afterRedriveItem != nil {
				a.afterRedriveItem(cp.Seen)
			}
		}
		if page.Next.IsZero() {
			break
		}
		// Left-alone entries are not saved one by one; the page end
		// saves them (or the next action's write-ahead does).
		cp.UpdatedAt = a.clock()
		if err := w.save(cp); err != nil {
			return err
		}
	}
	cp.Complete = true
	cp.UpdatedAt = a.clock()
	if err := w.save(cp); err != nil {
		return err
	}
	prog.finish(cp)
	fmt.Fprintf(a.stdout, "redrive complete: %s (checkpoint %s)\n", cp.summary(), w.path)
	if cp.Failed > 0 {
		return partialError{fmt.Sprintf("%d entries failed; run the same redrive again (dlqctl redrive --filter '%s' --rate %g/s …) to retry them", cp.Failed, cp.Filter, cp.Rate)}
	}
	return nil
}

// act performs one action on an entry.
func (a *app) act(ctx context.Context, op *operator.Operator, cp *checkpoint, id, action string) error {
	var err error
	switch action {
	case actApprove:
		_, err = op.Approve(ctx, a.scope, id, operator.Edits{By: cp.By})
	case actRunNow:
		_, err = op.ReplayNow(ctx, a.scope, id, cp.By)
	default:
		err = fmt.Errorf("redrive: unknown action %q", action)
	}
	return err
}

// count adds an action's outcome to the counters.
func (cp *checkpoint) count(action string, err error, id string, prog *progress) {
	switch {
	case err == nil && action == actApprove:
		cp.Approved++
	case err == nil:
		cp.RunNow++
	case errors.Is(err, store.ErrWrongStatus), errors.Is(err, store.ErrNotFound):
		// Changed since it was listed (a replay, another operator): not
		// ours to redo.
		cp.Skipped++
	default:
		cp.Failed++
		prog.note(fmt.Sprintf("%s: %v", id, err))
	}
}

// settlePending decides the entry a previous run named in its write-ahead
// and may or may not have acted on before it stopped. Unchanged since it
// was listed (same updated_at): the action did not happen, do it now.
// Changed, with a transition by this redrive's actor after that: the
// action happened, count it. Changed otherwise: someone else moved it,
// skip it. Either way it is acted on at most once.
func (a *app) settlePending(ctx context.Context, st *store.Store, op *operator.Operator, cp *checkpoint) error {
	p := cp.Pending
	cur, err := st.GetMeta(ctx, p.At.ID)
	if err == nil && a.scope != "" && cur.Tenant != a.scope {
		err = fmt.Errorf("%w: entry %q", store.ErrNotFound, p.At.ID)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		cp.Skipped++
	case err != nil:
		return err
	case cur.UpdatedAt.Equal(p.UpdatedAt):
		cp.count(p.Action, a.act(ctx, op, cp, p.At.ID, p.Action), p.At.ID, newProgress(a.stderr, false, 0))
	case actedSince(cur, cp.By, p.UpdatedAt):
		if p.Action == actApprove {
			cp.Approved++
		} else {
			cp.RunNow++
		}
	default:
		cp.Skipped++
	}
	cp.Pending = nil
	cp.Cursor = p.At
	cp.Seen++
	return nil
}

// actedSince reports whether by moved the entry after since.
func actedSince(e *store.Entry, by string, since time.Time) bool {
	for _, h := range e.History {
		if h.By == by && h.At.After(since) {
			return true
		}
	}
	return false
}

func (cp *checkpoint) summary() string {
	return fmt.Sprintf("%d approved, %d run now, %d skipped, %d failed, %d left alone", cp.Approved, cp.RunNow, cp.Skipped, cp.Failed, cp.LeftAlone)
}

// progress draws a bar on a terminal, plain lines elsewhere.
type progress struct {
	w     interface{ Write([]byte) (int, error) }
	tty   bool
	total int64
	start time.Time
	first int // entries passed before this run
	last  time.Time
	drawn bool
}

func newProgress(w interface{ Write([]byte) (int, error) }, tty bool, total int64) *progress {
	return &progress{w: w, tty: tty, total: total, start: time.Now(), first: -1}
}

func (p *progress) line(cp *checkpoint) string {
	if p.first < 0 {
		p.first = cp.Seen
	}
	rate := float64(cp.Seen-p.first) / max(time.Since(p.start).Seconds(), 0.001)
	return fmt.Sprintf("%d/%d  approved %d  run now %d  skipped %d  failed %d  left alone %d  %.1f/s",
		cp.Seen, p.total, cp.Approved, cp.RunNow, cp.Skipped, cp.Failed, cp.LeftAlone, rate)
}

func (p *progress) show(cp *checkpoint) {
	if p.tty {
		const width = 30
		filled := width
		if p.total > 0 {
			filled = min(width, int(int64(cp.Seen)*width/p.total))
		}
		fmt.Fprintf(p.w, "\r[%s%s] %s ", strings.Repeat("#", filled), strings.Repeat("-", width-filled), p.line(cp))
		p.drawn = true
		return
	}
	if time.Since(p.last) >= 2*time.Second || cp.Seen%10 == 0 {
		fmt.Fprintf(p.w, "redrive: %s\n", p.line(cp))
		p.last = time.Now()
	}
}

func (p *progress) note(s string) {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
	fmt.Fprintf(p.w, "redrive: %s\n", s)
}

func (p *progress) finish(cp *checkpoint) {
	if p.tty {
		p.show(cp)
		fmt.Fprintln(p.w)
		return
	}
	fmt.Fprintf(p.w, "redrive: %s\n", p.line(cp))
}
