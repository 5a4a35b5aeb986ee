package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file is the entries list: its filters, the one reading of them into
// a store query (the list's and a bulk redrive's), and the id lookup.

var uiFilters = append(slices.Clone(queryFilters), "q", "page_token", "before")

// queryFilters are the filters that make a query of the entries (the list's
// and a bulk redrive's); filterQuery reads them.
var queryFilters = []string{"tenant", "status", "category", "reason", "agent", "task_type", "from", "to"}

// filterQuery is the store query of the filters f (queryFilters' names):
// the one reading of them, for the entries list and a bulk redrive. Tenant
// and agent match whatever their case (store.Query.FoldCase); status and
// category are their vocabularies' (store.AllStatuses, triage.Categories),
// in any case, and anything else is a 400 naming the valid values, as is a
// malformed time. The reason's vocabulary is the policy's (checkReason).
func filterQuery(f map[string]string) (store.Query, error) {
	q := store.Query{Tenant: f["tenant"], Status: store.Status(strings.ToLower(f["status"])), Category: strings.ToLower(f["category"]),
		Reason: strings.ToLower(f["reason"]), Agent: f["agent"], TaskType: f["task_type"], FoldCase: true}
	if q.Status != "" && !q.Status.Known() {
		return q, uiBad("unknown status %q: one of %s", f["status"], joinNames(allStatuses()))
	}
	if q.Category != "" && !slices.Contains(triage.Categories, triage.Category(q.Category)) {
		return q, uiBad("unknown category %q: one of %s", f["category"], joinNames(triage.Categories))
	}
	var err error
	if q.CreatedFrom, err = parseTime(f["from"]); err != nil {
		return q, uiBad("from: %v", err)
	}
	if q.CreatedTo, err = parseTime(f["to"]); err != nil {
		return q, uiBad("to: %v", err)
	}
	return q, nil
}

// joinNames is a vocabulary in words, for the message that refuses a
// value outside it.
func joinNames[T ~string](names []T) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = string(n)
	}
	return strings.Join(out, ", ")
}

// checkReason refuses a reason filter that the policy in force does not
// name (a 400 listing its codes): the reason codes an entry can carry
// come from the policy, and a typo would otherwise match nothing, silently.
func (s *Server) checkReason(ctx context.Context, reason string) error {
	if reason == "" {
		return nil
	}
	codes, err := s.reasonCodes(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(codes, reason) {
		return uiBad("unknown reason %q: the policy in force names %s", reason, strings.Join(codes, ", "))
	}
	return nil
}

// reasonCodes are the policy in force's reason codes, triage.ReasonUnknown
// among them.
func (s *Server) reasonCodes(ctx context.Context) ([]string, error) {
	in, err := s.store.PolicyInForce(ctx)
	if err != nil {
		return nil, err
	}
	codes := in.Policy.ReasonCodes()
	if !slices.Contains(codes, triage.ReasonUnknown) {
		codes = append(codes, triage.ReasonUnknown)
		slices.Sort(codes)
	}
	return codes, nil
}

// entriesData is the entries page.
type entriesData struct {
	F          map[string]string
	Statuses   []store.Status
	Categories []triage.Category
	Entries    []*store.Entry
	// First, Prev and Next link the pages. Each is a template.URL,
	// because html/template escapes the = and & of a plain string inside
	// a query (the link would name one unknown filter); they are built
	// here from url.Values, so each is a relative URL with an encoded
	// query only.
	First, Prev, Next template.URL
	Lookup            bool
	// Filtered: a filter is set (a bulk redrive of everything is never
	// offered).
	Filtered bool
	// Matching counts the entries the filters select (an aggregation
	// query, never a read of them).
	Matching int64
	// Refresh is the auto-refresh toggle's state (refreshParam).
	Refresh refreshLink
	// Selectable: the operator's role acts on entries, so the rows carry
	// check boxes for "replay / discard selected".
	Selectable bool
	MaxSelect  int
}

func (s *Server) entries(r *http.Request) (string, string, any, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", "", nil, uiBad("malformed query string")
	}
	refresh := refreshOf(r)
	f := map[string]string{}
	for name, v := range vals {
		if !slices.Contains(uiFilters, name) {
			return "", "", nil, uiBad("unknown filter %q", name)
		}
		if f[name], err = filterValue(name, v); err != nil {
			return "", "", nil, err
		}
	}
	d := entriesData{F: f, Statuses: allStatuses(), Categories: triage.Categories, Refresh: refresh,
		Selectable: actorOf(r).Role.Operates(), MaxSelect: maxSelected}
	if q := f["q"]; q != "" {
		d.Lookup = true
		found, err := s.lookup(r, q)
		if err != nil {
			return "", "", nil, err
		}
		d.Entries = found
		return "entries", "Entries", d, nil
	}
	q, err := filterQuery(f)
	if err != nil {
		return "", "", nil, err
	}
	if err := s.checkReason(r.Context(), q.Reason); err != nil {
		return "", "", nil, err
	}
	for _, k := range queryFilters {
		d.Filtered = d.Filtered || f[k] != ""
	}
	q.View, q.Limit = store.ListView, DefaultPageSize
	if f["page_token"] != "" && f["before"] != "" {
		return "", "", nil, uiBad("page_token and before: one page at a time")
	}
	if q.After, err = store.ParseCursor(f["page_token"]); err != nil {
		return "", "", nil, uiBad("page_token is not a token this listing made")
	}
	before, err := store.ParseCursor(f["before"])
	if err != nil {
		return "", "", nil, uiBad("before is not a token this listing made")
	}
	backwards := !before.IsZero()
	if backwards {
		// The page before this one: the entries just newer than its
		// first, oldest first from there, shown newest first.
		q.Order, q.After = store.OldestFirst, before
	}
	// The page and the count of what the filters select are independent
	// reads: at once, the page takes the slower one's time, not both.
	var p store.Page
	err = concurrently(
		func() (err error) { p, err = s.store.Entries(r.Context(), q); return err },
		func() (err error) { d.Matching, err = s.store.Count(r.Context(), q); return err },
	)
	if err != nil {
		return "", "", nil, err
	}
	d.Entries = p.Entries
	link := func(k, token string) template.URL {
		u := url.Values{}
		for _, name := range queryFilters {
			if v := f[name]; v != "" {
				u.Set(name, v)
			}
		}
		if refresh.On {
			u.Set("refresh", "on")
		}
		if k != "" {
			u.Set(k, token)
		}
		if len(u) == 0 {
			return "/entries"
		}
		return template.URL("/entries?" + u.Encode())
	}
	n := len(p.Entries)
	if backwards {
		slices.Reverse(d.Entries)
		if n > 0 {
			d.Next = link("page_token", cursorOf(d.Entries[n-1]).Encode())
			if !p.Next.IsZero() {
				d.Prev = link("before", cursorOf(d.Entries[0]).Encode())
			}
		}
	} else {
		if !p.Next.IsZero() {
			d.Next = link("page_token", p.Next.Encode())
		}
		if !q.After.IsZero() && n > 0 {
			d.Prev = link("before", cursorOf(d.Entries[0]).Encode())
		}
	}
	if d.Prev != "" {
		d.First = link("", "")
	}
	return "entries", "Entries", d, nil
}

// cursorOf is an entry's place in the list's order (created_at, id).
func cursorOf(e *store.Entry) store.Cursor { return store.Cursor{At: e.CreatedAt, ID: e.ID} }

// lookup finds entries by entry id or its start, task id or root id.
func (s *Server) lookup(r *http.Request, q string) ([]*store.Entry, error) {
	var out []*store.Entry
	seen := map[string]bool{}
	if _, err := store.EventID(q); err == nil {
		e, err := s.store.GetMeta(r.Context(), q)
		if err == nil {
			out, seen[e.ID] = append(out, e), true
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	// An id's start: what an operator copies from a log line or types.
	if byPrefix, err := s.store.EntriesByIDPrefix(r.Context(), q, DefaultPageSize); err == nil {
		for _, e := range byPrefix {
			if !seen[e.ID] {
				out, seen[e.ID] = append(out, e), true
			}
		}
	} else if !errors.Is(err, store.ErrBadQuery) {
		return nil, err
	}
	for _, query := range []store.Query{{TaskID: q}, {RootID: q}} {
		query.View, query.Limit = store.ListView, DefaultPageSize
		p, err := s.store.Entries(r.Context(), query)
		if err != nil {
			return nil, err
		}
		for _, e := range p.Entries {
			if !seen[e.ID] {
				out, seen[e.ID] = append(out, e), true
			}
		}
	}
	return out, nil
}

func parseTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not RFC 3339, YYYY-MM-DDTHH:MM or YYYY-MM-DD", v)
}

// allStatuses are the statuses in the entries page's choice, by name.
func allStatuses() []store.Status { return slices.Sorted(slices.Values(store.AllStatuses)) }
