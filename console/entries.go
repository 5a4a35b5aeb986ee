package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the entries list: its filters, the one reading of them into
// a store query (the list's and a bulk redrive's), and the id lookup.

var uiFilters = append(slices.Clone(queryFilters), "q", "page_token")

// queryFilters are the filters that make a query of the entries (the list's
// and a bulk redrive's); filterQuery reads them.
var queryFilters = []string{"tenant", "status", "category", "reason", "agent", "task_type", "from", "to"}

// filterQuery is the store query of the filters f (queryFilters' names):
// the one reading of them, for the entries list and a bulk redrive. An
// unknown status or a malformed time is a 400.
func filterQuery(f map[string]string) (store.Query, error) {
	q := store.Query{Tenant: f["tenant"], Status: store.Status(f["status"]), Category: f["category"], Reason: f["reason"],
		Agent: f["agent"], TaskType: f["task_type"]}
	if q.Status != "" && !q.Status.Known() {
		return q, uiBad("unknown status %q", q.Status)
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

// entriesData is the entries page.
type entriesData struct {
	F        map[string]string
	Statuses []store.Status
	Entries  []*store.Entry
	// Next is the link to the next page. A template.URL, because
	// html/template escapes the = and & of a plain string inside a query
	// (the link would name one unknown filter); it is built here from
	// url.Values, so it is a relative URL with an encoded query only.
	Next   template.URL
	Lookup bool
	// Matching counts the entries the filters select (an aggregation
	// query, never a read of them).
	Matching int64
}

func (s *Server) entries(r *http.Request) (string, string, any, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", "", nil, uiBad("malformed query string")
	}
	f := map[string]string{}
	for name, v := range vals {
		known := false
		for _, k := range uiFilters {
			known = known || k == name
		}
		if !known {
			return "", "", nil, uiBad("unknown filter %q", name)
		}
		if f[name], err = filterValue(name, v); err != nil {
			return "", "", nil, err
		}
	}
	d := entriesData{F: f, Statuses: allStatuses()}
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
	q.View, q.Limit = store.ListView, DefaultPageSize
	if q.After, err = store.ParseCursor(f["page_token"]); err != nil {
		return "", "", nil, uiBad("page_token is not a token this listing made")
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
	if !p.Next.IsZero() {
		next := url.Values{}
		for k, v := range f {
			if v != "" && k != "page_token" {
				next.Set(k, v)
			}
		}
		next.Set("page_token", p.Next.Encode())
		d.Next = template.URL("/entries?" + next.Encode())
	}
	return "entries", "Entries", d, nil
}

// lookup finds entries by entry id, task id or root id.
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
