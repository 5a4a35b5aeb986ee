package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// The breaker commands are the two explicit ways past an open tenant breaker
// (docs/runbook.md, "The gates and their overrides"), each by a named actor
// with a reason recorded in the breaker's history, and the reads an operator
// needs before using them.

func (a *app) cmdBreaker(ctx context.Context, args []string) error {
	return subcommand(ctx, "breaker", "breaker ls | show TENANT | close TENANT --reason R | probe ENTRY --reason R",
		map[string]func(context.Context, []string) error{"ls": a.breakerLs, "show": a.breakerShow, "close": a.breakerClose, "probe": a.breakerProbe}, args)
}

// breakerJSON is a breaker with the number of its tenant's held entries.
type breakerJSON struct {
	*store.Breaker
	Held int64 `json:"held"`
}

// breakerStore is the store, for reading or overriding tenant's breaker:
// another tenant's breaker is "not found" to a tenant-limited caller, as
// for entries.
func (a *app) breakerStore(ctx context.Context, tenant string) (*store.Store, error) {
	if a.scope != "" && tenant != a.scope {
		return nil, fmt.Errorf("%w: breaker of tenant %q", store.ErrNotFound, tenant)
	}
	return a.store(ctx)
}

func (a *app) heldOf(ctx context.Context, st *store.Store, tenant string) (int64, error) {
	return st.Count(ctx, store.Query{Tenant: tenant, Status: store.Held})
}

func (a *app) breakerLs(ctx context.Context, args []string) error {
	asJSON, err := parseJSONOnly("breaker ls", args)
	if err != nil {
		return err
	}
	st, err := a.listingStore(ctx)
	if err != nil {
		return err
	}
	var list []*store.Breaker
	if a.scope != "" {
		b, err := st.GetBreaker(ctx, a.scope)
		if err != nil {
			return err
		}
		if b.State != store.BreakerClosed {
			list = append(list, b)
		}
	} else if list, err = st.ListBreakers(ctx, store.BreakerStatesNotClosed(), reconciler.MaxBreakers); err != nil {
		return err
	}
	out := make([]breakerJSON, 0, len(list))
	for _, b := range list {
		held, err := a.heldOf(ctx, st, b.Tenant)
		if err != nil {
			return err
		}
		out = append(out, breakerJSON{Breaker: b, Held: held})
	}
	if asJSON {
		return writeJSON(a.stdout, map[string]any{"breakers": out})
	}
	if len(out) == 0 {
		fmt.Fprintln(a.stdout, "no breaker is open or half-open")
		a.warnIfEmpty(ctx, st)
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSTATE\tSINCE\tPROBE\tHELD\tLAST CHANGE")
	for _, b := range out {
		outf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", b.Tenant, b.State, since(b.Breaker).Format(time.RFC3339), orDash(b.ProbeEntry), b.Held, lastChange(b.Breaker))
	}
	return tw.Flush()
}

// since is when the breaker entered its state.
func since(b *store.Breaker) time.Time {
	switch b.State {
	case store.BreakerOpen:
		return b.OpenedAt
	case store.BreakerHalfOpen:
		return b.HalfOpenAt
	}
	if n := len(b.History); n > 0 {
		return b.History[n-1].At
	}
	return time.Time{}
}

func lastChange(b *store.Breaker) string {
	if len(b.History) == 0 {
		return "-"
	}
	h := b.History[len(b.History)-1]
	return fmt.Sprintf("by %s%s", h.Actor(), ifSet(h.Note != "", ": "+h.Note))
}

func (a *app) breakerShow(ctx context.Context, args []string) error {
	fs := newFlags("breaker show")
	asJSON := fs.Bool("json", false, "JSON output")
	tenant, err := parseOne(fs, args, "tenant")
	if err == nil {
		tenant, err = storedTenantArg("breaker show", tenant)
	}
	if err != nil {
		return err
	}
	st, err := a.breakerStore(ctx, tenant)
	if err != nil {
		return err
	}
	b, err := st.GetBreaker(ctx, tenant)
	if err != nil {
		return err
	}
	held, err := a.heldOf(ctx, st, tenant)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(a.stdout, breakerJSON{Breaker: b, Held: held})
	}
	w := a.stdout
	kv := func(k, format string, args ...any) { fmt.Fprintf(w, "%-9s %s\n", k, termf(format, args...)) }
	kv("tenant", "%s", b.Tenant)
	switch b.State {
	case store.BreakerClosed:
		kv("state", "closed: replays go through")
	case store.BreakerOpen:
		kv("state", "open since %s: every replay of the tenant is held", b.OpenedAt.Format(time.RFC3339))
	default:
		kv("state", "half-open since %s: one probe replay goes, the rest are held", b.HalfOpenAt.Format(time.RFC3339))
	}
	if b.ProbeEntry != "" {
		kv("probe", "%s since %s (dlqctl show %s)", b.ProbeEntry, b.ProbeAt.Format(time.RFC3339), b.ProbeEntry)
	} else {
		kv("probe", "-")
	}
	kv("failures", "%d in the window", len(b.Failures))
	kv("held", "%d entries (dlqctl ls --tenant %s --status held)", held, b.Tenant)
	if b.State != store.BreakerClosed {
		kv("override", "dlqctl breaker probe ENTRY --reason R | dlqctl breaker close %s --reason R", b.Tenant)
	}
	writeHistory(w, b.History)
	return nil
}

// overrideArgs reads the arguments both overrides take: one target (what
// names it), a required --reason and --by.
func (a *app) overrideArgs(name, what string, args []string) (target, reason string, by authority.Actor, err error) {
	fs := newFlags(name)
	reasonF := fs.String("reason", "", "why (required; recorded in the breaker's history)")
	byF := fs.String("by", "", "who acts (default DLQCTL_ACTOR or dlqctl:$USER)")
	if target, err = parseOne(fs, args, what); err != nil {
		return "", "", authority.Actor{}, err
	}
	if reason, err = operator.Reason("a "+name, *reasonF); err != nil {
		return "", "", authority.Actor{}, usagef("%s --reason: %v", name, err)
	}
	if what == "tenant" {
		target, err = storedTenantArg(name, target)
	} else {
		target, err = entryArg(name+" "+what, target)
	}
	if err != nil {
		return "", "", authority.Actor{}, err
	}
	return target, reason, a.actor(*byF), nil
}

func (a *app) breakerClose(ctx context.Context, args []string) error {
	tenant, reason, by, err := a.overrideArgs("breaker close", "tenant", args)
	if err != nil {
		return err
	}
	st, err := a.breakerStore(ctx, tenant)
	if err != nil {
		return err
	}
	// Closing schedules nothing (reconcile releases the held entries), so
	// it needs no Cloud Tasks configuration.
	b, err := operator.New(st, nil).CloseBreaker(ctx, tenant, by, reason)
	if err != nil {
		return err
	}
	held, err := a.heldOf(ctx, st, tenant)
	if err != nil {
		return err
	}
	outf(a.stdout, "breaker of %s: %s; %d held entries are released by reconcile's next run (dlqctl audit runs it now)\n", b.Tenant, b.State, held)
	return nil
}

func (a *app) breakerProbe(ctx context.Context, args []string) error {
	id, reason, by, err := a.overrideArgs("breaker probe", "entry id", args)
	if err != nil {
		return err
	}
	op, err := a.operator(ctx, false)
	if err != nil {
		return err
	}
	e, err := op.ProbeNow(ctx, a.scope, id, by, reason)
	if e == nil && err != nil {
		return err
	}
	outf(a.stdout, "%s: the half-open probe of tenant %s's breaker, %s, task %s due %s\n", e.ID, e.Tenant, e.Status, e.TaskName, e.NextRetryAt.Format(time.RFC3339))
	return err
}
