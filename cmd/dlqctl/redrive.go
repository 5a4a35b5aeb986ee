package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/store"
)

// actApprove and actRunNow are the redrive's actions (shared/redrive).
const (
	actApprove = redrive.Approve
	actRunNow  = redrive.RunNow
)

// partialError ends a redrive that did not do everything (exit 5).
type partialError struct{ msg string }

func (e partialError) Error() string { return e.msg }
func (partialError) ExitCode() int   { return exitPartial }

// parseRate reads "5/s", "5", "300/m".
func parseRate(s string) (float64, error) {
	n, err := redrive.ParseRate(s)
	if err != nil {
		return 0, usagef("--rate: %v", err)
	}
	return n, nil
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
	include := fs.Bool(redrive.OptInFlag, false, "include the entries whose rule keeps approval for approvers (by default governance, poison, unknown_commit_state)")
	err := parseNone(fs, args)
	if err != nil {
		return err
	}
	var included []string
	if *include {
		included = []string{redrive.OptInApproverRules}
	}
	var cp *checkpoint
	path := *cpPath
	if *resume != "" {
		if len(filters) > 0 || len(included) > 0 || *cpPath != "" {
			return usagef("--resume takes the filter, the --%s opt-in and the file from the checkpoint; drop --filter, --%s and --checkpoint", redrive.OptInFlag, redrive.OptInFlag)
		}
		if cp, err = loadCheckpoint(*resume); err != nil {
			return err
		}
		if cp.Complete {
			outf(a.stdout, "redrive in %s is complete: %s\n", *resume, redrive.Summary(&cp.RedriveProgress))
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
		cp = &checkpoint{Schema: checkpointSchema, Filter: f, Include: included, Rate: rate, Scope: a.scope, By: a.actor(*by).Name, StartedAt: now}
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
	if *resume == "" {
		// The redrive acts on what its plan shows: failures recorded while
		// the question waits for an answer, or the run goes on (among them
		// its own replays' deaths), match the filter but are not the plan's.
		cp.Filter.BulkFilter = p.Until(cp.Filter.BulkFilter)
	}
	printPlan(a.stdout, p, cp, *resume != "")
	if *dry {
		fmt.Fprintln(a.stdout, "dry run: nothing changed")
		return nil
	}
	if p.Acts() == 0 && cp.Pending == nil && *resume == "" {
		fmt.Fprintln(a.stdout, "nothing to do: no entry would be acted on")
		return nil
	}
	if !*yes {
		ok, err := a.confirm(fmt.Sprintf("act on %d entries at %.3g/s? [y/N] ", p.Acts(), cp.Rate))
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
	outf(a.stderr, "redrive %s at %.3g/s; checkpoint %s\n", cp.Filter, cp.Rate, path)
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

func (a *app) redrive(ctx context.Context, st *store.Store, op *operator.Operator, cp *checkpoint, w *checkpointFile) error {
	prog := newProgress(a.stderr, a.stderrIsTTY(), cp.Total)
	prog.show(cp)
	run := &redrive.Run{Store: st, Actions: op, Query: cp.Filter.query(store.ListView), Include: cp.Include, Scope: a.scope, By: cp.actor(),
		Rate: cp.Rate, Progress: &cp.RedriveProgress,
		Save: func(context.Context) error {
			cp.UpdatedAt = a.clock()
			return w.save(cp)
		},
		BeforeAct: a.beforeRedriveAct,
		AfterAct: func(seen int) {
			prog.show(cp)
			if a.afterRedriveItem != nil {
				a.afterRedriveItem(seen)
			}
		},
		Failed: func(id string, err error) { prog.note(fmt.Sprintf("%s: %v", id, err)) },
	}
	err := run.Do(ctx)
	if errors.Is(err, redrive.ErrStopped) {
		prog.finish(cp)
		resume := "dlqctl redrive --resume " + w.path
		if a.scope != "" {
			resume = fmt.Sprintf("dlqctl --tenant %s redrive --resume %s", a.scope, w.path)
		}
		return partialError{fmt.Sprintf("redrive interrupted after %d of %d entries (%s); checkpoint saved\nresume with: %s",
			cp.Seen, cp.Total, redrive.Summary(&cp.RedriveProgress), resume)}
	}
	if err != nil {
		return err
	}
	cp.Complete = true
	cp.UpdatedAt = a.clock()
	if err := w.save(cp); err != nil {
		return err
	}
	prog.finish(cp)
	outf(a.stdout, "redrive complete: %s (checkpoint %s)\n", redrive.Summary(&cp.RedriveProgress), w.path)
	if cp.Failed > 0 {
		return partialError{fmt.Sprintf("%d entries failed; run the same redrive again (dlqctl redrive --filter '%s' --rate %g/s …) to retry them", cp.Failed, cp.Filter, cp.Rate)}
	}
	return nil
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
		outf(p.w, "\r[%s%s] %s ", strings.Repeat("#", filled), strings.Repeat("-", width-filled), p.line(cp))
		p.drawn = true
		return
	}
	if time.Since(p.last) >= 2*time.Second || cp.Seen%10 == 0 {
		outf(p.w, "redrive: %s\n", p.line(cp))
		p.last = time.Now()
	}
}

func (p *progress) note(s string) {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
	outf(p.w, "redrive: %s\n", s)
}

func (p *progress) finish(cp *checkpoint) {
	if p.tty {
		p.show(cp)
		fmt.Fprintln(p.w)
		return
	}
	outf(p.w, "redrive: %s\n", p.line(cp))
}
