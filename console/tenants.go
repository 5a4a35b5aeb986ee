package console

import (
	"context"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the tenants and breakers page and its breaker actions.

// What the tenants page reads: the breakers (a bounded list, searched and
// paged here), and per row of the page its held count and, for a breaker
// not closed, the entries a probe may be picked from.
const (
	maxTenantBreakers = 500
	tenantsPerPage    = 25
	probeChoices      = 10
)

// tenantsData is the tenants and breakers page.
type tenantsData struct {
	Rows []tenantRow
	// Q is the search (a part of the tenant's name, any case); Shown of
	// Matching breakers are on page Page of Pages.
	Q                    string
	Matching, Page       int
	Pages                int
	Prev, Next           template.URL
	Truncated            bool
	Override             bool
	ReleaseRate, MaxRate string
}

// tenantRow is one tenant's breaker with what the page shows beside it.
type tenantRow struct {
	B *store.Breaker
	// Held counts the tenant's held entries (an aggregation query).
	Held int64
	// Probes are entries a probe may be sent with (held or scheduled).
	Probes []string
	// Change is the last change in words.
	Change string
}

func (s *Server) tenants(r *http.Request) (string, string, any, error) {
	vals, err := pageQuery(r, "the tenants page takes q (a search) and page", "q", "page", "done")
	if err != nil {
		return "", "", nil, err
	}
	d := tenantsData{Q: strings.TrimSpace(vals.Get("q")), Page: 1, ReleaseRate: humanRate(DefaultBulkRate),
		Override: authority.May(actorOf(r), authority.Breaker, authority.Grant{}) == nil}
	if p := vals.Get("page"); p != "" {
		if d.Page, err = strconv.Atoi(p); err != nil || d.Page < 1 {
			return "", "", nil, uiBad("page %q is not a page number (1, 2, …)", p)
		}
	}
	ctx := r.Context()
	bs, err := s.store.ListBreakers(ctx, store.BreakerStates(), maxTenantBreakers)
	if err != nil {
		return "", "", nil, err
	}
	d.Truncated = len(bs) == maxTenantBreakers
	if d.Q != "" {
		q := strings.ToLower(d.Q)
		kept := bs[:0]
		for _, b := range bs {
			if strings.Contains(strings.ToLower(b.Tenant), q) {
				kept = append(kept, b)
			}
		}
		bs = kept
	}
	sort.Slice(bs, func(i, j int) bool {
		if bs[i].State != bs[j].State {
			return bs[i].State > bs[j].State // open, half_open, closed
		}
		return bs[i].Tenant < bs[j].Tenant
	})
	d.Matching = len(bs)
	d.Pages = max(1, (len(bs)+tenantsPerPage-1)/tenantsPerPage)
	if d.Page > d.Pages {
		return "", "", nil, uiBad("page %d: there are %d", d.Page, d.Pages)
	}
	bs = bs[(d.Page-1)*tenantsPerPage : min(len(bs), d.Page*tenantsPerPage)]
	d.Rows = make([]tenantRow, len(bs))
	reads := make([]func() error, 0, 2*len(bs))
	for i, b := range bs {
		d.Rows[i] = tenantRow{B: b, Change: breakerChange(b)}
		row := &d.Rows[i]
		reads = append(reads, func() (err error) {
			row.Held, err = s.store.Count(ctx, store.Query{Tenant: b.Tenant, Status: store.Held})
			return err
		})
		if b.State != store.BreakerClosed && d.Override {
			reads = append(reads, func() error {
				p, err := s.store.Entries(ctx, store.Query{Tenant: b.Tenant, Statuses: []store.Status{store.Held, store.Scheduled},
					View: store.ListView, Limit: probeChoices})
				for _, e := range p.Entries {
					row.Probes = append(row.Probes, e.ID)
				}
				return err
			})
		}
	}
	if err := concurrently(reads...); err != nil {
		return "", "", nil, err
	}
	link := func(page int) template.URL {
		u := url.Values{}
		if d.Q != "" {
			u.Set("q", d.Q)
		}
		if refreshOf(r).On {
			u.Set("refresh", "on")
		}
		u.Set("page", strconv.Itoa(page))
		return template.URL("/tenants?" + u.Encode())
	}
	if d.Page > 1 {
		d.Prev = link(d.Page - 1)
	}
	if d.Page < d.Pages {
		d.Next = link(d.Page + 1)
	}
	return "tenants", "Tenants and breakers", d, nil
}

// breakerChange is a breaker's last change in words. An override's note
// names its actor already ("closed by alice (operator): …"), so the
// actor is said once.
func breakerChange(b *store.Breaker) string {
	if len(b.History) == 0 {
		return ""
	}
	t := b.History[len(b.History)-1]
	actor := t.By
	if t.Role != "" {
		actor += " (" + string(t.Role) + ")"
	}
	out := t.From + " → " + t.To
	switch {
	case t.Note == "":
		out += " by " + actor
	case strings.Contains(t.Note, "by "+actor):
		out += ": " + t.Note
	default:
		out += " by " + actor + ": " + t.Note
	}
	return out
}

// breakerAction closes a tenant's breaker, or sends an entry as its probe.
func (s *Server) breakerAction(_ http.ResponseWriter, r *http.Request, who authority.Actor) (string, error) {
	tenant, err := pathTenant(r.PathValue("tenant"))
	if err != nil {
		return "", err
	}
	reason, err := reasonOf(r.PostFormValue("reason"), "a breaker action")
	if err != nil {
		return "", err
	}
	switch r.PathValue("action") {
	case "close":
		if _, err := s.actions.CloseBreaker(r.Context(), tenant, who, reason); err != nil {
			return "", err
		}
		run, err := s.releaseHeld(r.Context(), tenant, who, reason)
		if err != nil || run == nil {
			return "/tenants?done=breaker-closed", err
		}
		next, err := consolePath("bulk", run.ID)
		return next + "?done=breaker-closed-releasing", err
	case "probe":
		id, err := pathEntry(strings.TrimSpace(r.PostFormValue("entry")))
		if err != nil {
			return "", uiBad("a probe names a held or scheduled entry of the tenant")
		}
		_, err = s.actions.ProbeNow(r.Context(), tenant, id, who, reason)
		return s.recorded(r, err, "/tenants", "probe-sent", "replay-task-pending")
	}
	return "", &uiError{http.StatusNotFound, "no such action"}
}

// releaseHeld starts, after an operator closed tenant's breaker, a bulk run
// that releases the tenant's held entries at the default bulk rate: each
// gets a task due now (operator.ReplayNowIn), which meets the gates as any
// replay does, and the run can be watched and cancelled as any bulk run.
// No run when nothing is held (nil).
func (s *Server) releaseHeld(ctx context.Context, tenant string, who authority.Actor, reason string) (*store.BulkRun, error) {
	filter := store.BulkFilter{Tenant: tenant, Status: store.Held}
	// Every held entry, those of rules kept for approvers too: each is
	// run now, never approved, so its replay still meets the policy, as
	// when reconcile releases it.
	include := []string{redrive.OptInApproverRules, redrive.OptInReleaseHeld}
	why := "release the held entries after the breaker's close: " + reason
	return s.startBulkRun(ctx, who, filter, include, DefaultBulkRate, why, "tenant="+tenant+", status=held")
}
