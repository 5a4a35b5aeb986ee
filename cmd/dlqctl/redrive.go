package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// checkpoint is a redrive's progress on disk: enough to resume after an
// interruption without replaying any entry twice.
type checkpoint struct {
	Schema    string    `json:"schema"`
	Filter    filter    `json:"filter"`
	Rate      float64   `json:"rate_per_second"`
	Scope     string    `json:"scope,omitempty"`
	By        string    `json:"by"`
	Total     int64     `json:"total"`
	Cursor    string    `json:"cursor,omitempty"` // the page in progress starts after this token
	Done      []string  `json:"done"`             // entries acted on or skipped, in order
	Replayed  int       `json:"replayed"`
	Skipped   int       `json:"skipped"`
	Failed    int       `json:"failed"`
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Complete  bool      `json:"complete"`
}

const checkpointSchema = "jsdlq.redrive.v1"

// partialError ends a redrive that did not do everything (exit 5).
type partialError struct{ msg string }

func (e partialError) Error() string { return e.msg }
func (partialError) ExitCode() int   { return exitPartial }

func (cp *checkpoint) save(path string) error {
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

func loadCheckpoint(path string) (*checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil || cp.Schema != checkpointSchema {
		return nil, usagef("%s is not a dlqctl redrive checkpoint", path)
	}
	return &cp, nil
}

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
	rateS := fs.String("rate", "", "replays per second, e.g. 5/s (required)")
	dry := fs.Bool("dry-run", false, "list what would be replayed; change nothing")
	cpPath := fs.String("checkpoint", "", "checkpoint file (default dlqctl-redrive-<time>.json)")
	resume := fs.String("resume", "", "continue the redrive saved in this checkpoint")
	by := fs.String("by", "", "who acts (default DLQCTL_ACTOR or dlqctl:$USER)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("redrive takes no arguments (got %q)", pos)
	}
	var cp *checkpoint
	path := *cpPath
	if *resume != "" {
		if len(filters) > 0 || *dry {
			return usagef("--resume takes the filter from the checkpoint; drop --filter and --dry-run")
		}
		if cp, err = loadCheckpoint(*resume); err != nil {
			return err
		}
		if cp.Complete {
			fmt.Fprintf(a.stdout, "redrive in %s is complete: %d replayed, %d skipped, %d failed\n", *resume, cp.Replayed, cp.Skipped, cp.Failed)
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
		cp = &checkpoint{Schema: checkpointSchema, Filter: f, Rate: rate, Scope: a.scope, By: a.actor(*by), StartedAt: now}
		if path == "" {
			path = "dlqctl-redrive-" + now.Format("20060102T150405Z") + ".json"
		}
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	if *dry {
		return a.redriveDry(ctx, st, cp)
	}
	op, err := a.operator(ctx, true)
	if err != nil {
		return err
	}
	if cp.Total == 0 {
		if cp.Total, err = a.count(ctx, st, cp.Filter); err != nil {
			return err
		}
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if err := cp.save(path); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "redrive %s at %.3g/s: %d entries match; checkpoint %s\n", cp.Filter, cp.Rate, cp.Total, path)
	return a.redrive(ctx, st, op, cp, path)
}

// count is how many entries match f (for the progress bar).
func (a *app) count(ctx context.Context, st *store.Store, f filter) (int64, error) {
	return st.Count(ctx, f.query(store.ListView))
}

func (a *app) redriveDry(ctx context.Context, st *store.Store, cp *checkpoint) error {
	tok := ""
	counts := map[string]int{}
	for {
		page, next, err := a.query(ctx, st, cp.Filter, tok, 200)
		if err != nil {
			return err
		}
		for _, e := range page {
			act := redriveAction(e.Status)
			counts[act]++
			fmt.Fprintf(a.stdout, "%s\t%s\t%s\t%s\n", e.ID, e.Status, e.ReasonCode, act)
		}
		if next == "" {
			break
		}
		tok = next
	}
	fmt.Fprintf(a.stdout, "dry run, nothing changed: %d approve, %d replay-now, %d skip\n", counts["approve"], counts["replay-now"], counts["skip"])
	return nil
}

// redriveAction is what redrive does with an entry in status st.
func redriveAction(st store.Status) string {
	switch {
	case slices.Contains(operator.Approvable, st):
		return "approve"
	case slices.Contains(operator.Runnable, st):
		return "replay-now"
	}
	return "skip"
}

func (a *app) redrive(ctx context.Context, st *store.Store, op *operator.Operator, cp *checkpoint, path string) error {
	done := make(map[string]bool, len(cp.Done))
	for _, id := range cp.Done {
		done[id] = true
	}
	b := &bucket{interval: time.Duration(float64(time.Second) / cp.Rate)}
	prog := newProgress(a.stderr, a.stderrIsTTY(), cp.Total)
	prog.show(cp)
	interrupted := func() error {
		cp.UpdatedAt = a.clock()
		if err := cp.save(path); err != nil {
			return err
		}
		prog.finish(cp)
		resume := "dlqctl redrive --resume " + path
		if a.scope != "" {
			resume = fmt.Sprintf("dlqctl --tenant %s redrive --resume %s", a.scope, path)
		}
		return partialError{fmt.Sprintf("redrive interrupted after %d of %d entries (%d replayed, %d skipped, %d failed); checkpoint saved\nresume with: %s",
			len(cp.Done), cp.Total, cp.Replayed, cp.Skipped, cp.Failed, resume)}
	}
	for {
		if ctx.Err() != nil {
			return interrupted()
		}
		page, next, err := a.query(context.WithoutCancel(ctx), st, cp.Filter, cp.Cursor, 100)
		if err != nil {
			return err
		}
		for _, e := range page {
			if done[e.ID] {
				continue
			}
			if err := b.wait(ctx); err != nil {
				return interrupted()
			}
			// The action runs to its end even when Ctrl-C arrives meanwhile,
			// so the checkpoint never misses an entry that was acted on.
			actx := context.WithoutCancel(ctx)
			var aerr error
			switch redriveAction(e.Status) {
			case "approve":
				_, aerr = op.Approve(actx, a.scope, e.ID, operator.Edits{By: cp.By})
			case "replay-now":
				_, aerr = op.ReplayNow(actx, a.scope, e.ID, cp.By)
			default:
				aerr = store.ErrWrongStatus
			}
			switch {
			case aerr == nil:
				cp.Replayed++
			case errors.Is(aerr, store.ErrWrongStatus), errors.Is(aerr, store.ErrNotFound):
				// Changed since it was listed (a replay, another operator,
				// or this redrive before an interruption): not ours to redo.
				cp.Skipped++
			default:
				cp.Failed++
				prog.note(fmt.Sprintf("%s: %v", e.ID, aerr))
			}
			cp.Done = append(cp.Done, e.ID)
			done[e.ID] = true
			cp.UpdatedAt = a.clock()
			if err := cp.save(path); err != nil {
				return err
			}
			prog.show(cp)
			if a.afterRedriveItem != nil {
				a.afterRedriveItem(len(cp.Done))
			}
		}
		if next == "" {
			break
		}
		cp.Cursor = next
		if err := cp.save(path); err != nil {
			return err
		}
	}
	cp.Complete = true
	cp.UpdatedAt = a.clock()
	if err := cp.save(path); err != nil {
		return err
	}
	prog.finish(cp)
	fmt.Fprintf(a.stdout, "redrive complete: %d replayed, %d skipped, %d failed (checkpoint %s)\n", cp.Replayed, cp.Skipped, cp.Failed, path)
	if cp.Failed > 0 {
		return partialError{fmt.Sprintf("%d entries failed; run the same redrive again (dlqctl redrive --filter '%s' --rate %g/s) to retry them", cp.Failed, cp.Filter, cp.Rate)}
	}
	return nil
}

// progress draws a bar on a terminal, plain lines elsewhere.
type progress struct {
	w     interface{ Write([]byte) (int, error) }
	tty   bool
	total int64
	start time.Time
	last  time.Time
	drawn bool
}

func newProgress(w interface{ Write([]byte) (int, error) }, tty bool, total int64) *progress {
	return &progress{w: w, tty: tty, total: total, start: time.Now()}
}

func (p *progress) line(cp *checkpoint) string {
	n := len(cp.Done)
	rate := float64(n) / max(time.Since(p.start).Seconds(), 0.001)
	return fmt.Sprintf("%d/%d  replayed %d  skipped %d  failed %d  %.1f/s", n, p.total, cp.Replayed, cp.Skipped, cp.Failed, rate)
}

func (p *progress) show(cp *checkpoint) {
	if p.tty {
		const width = 30
		filled := width
		if p.total > 0 {
			filled = min(width, int(int64(len(cp.Done))*width/p.total))
		}
		fmt.Fprintf(p.w, "\r[%s%s] %s ", strings.Repeat("#", filled), strings.Repeat("-", width-filled), p.line(cp))
		p.drawn = true
		return
	}
	if time.Since(p.last) >= 2*time.Second || len(cp.Done)%10 == 0 {
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
