package console

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/outcome"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file is the operator UI: server-rendered pages over the store's
// query API, and forms whose actions go through shared/operator with the
// verified operator as the actor.

//go:embed templates/*.html static/*
var assets embed.FS

var pages = template.Must(template.New("").Funcs(linkFuncs).Funcs(template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return time.Since(t).Round(time.Minute).String()
	},
	"join":      strings.Join,
	"pct":       pct,
	"retention": triage.FormatRetention,
	"add":       func(a, b int) int { return a + b },
	// isTrue reads an optional flag (a set false is not nil).
	"isTrue": func(b *bool) bool { return b != nil && *b },
	// dict passes several values to a template: "key", value, ….
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, errors.New("dict: an odd number of arguments")
		}
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			k, ok := kv[i].(string)
			if !ok {
				return nil, errors.New("dict: a key is not a string")
			}
			m[k] = kv[i+1]
		}
		return m, nil
	},
	"lastChange": func(h []store.Transition) *store.Transition {
		if len(h) == 0 {
			return nil
		}
		return &h[len(h)-1]
	},
}).ParseFS(assets, "templates/*.html"))

// Entries list filters (query parameters); any other is refused.
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

func (s *Server) routeUI(mux *http.ServeMux) {
	static := http.FileServerFS(assets)
	mux.Handle("GET /static/", static)
	mux.Handle("GET /{$}", s.page(s.overview))
	mux.Handle("GET /entries", s.page(s.entries))
	mux.Handle("GET /entries/{entry}", s.page(s.entry))
	mux.Handle("GET /entries/{entry}/payload", http.HandlerFunc(s.payloadDownload))
	mux.Handle("GET /tenants", s.page(s.tenants))
	mux.Handle("GET /audits", s.page(s.audits))
	mux.Handle("GET /audits/{run}", s.page(s.auditReport))
	mux.Handle("GET /policy", s.page(s.policy))
	mux.Handle("GET /predictions", s.page(s.predictions))
	cop := http.NewCrossOriginProtection()
	mux.Handle("POST /entries/{entry}/{action}", cop.Handler(s.form(s.entryAction)))
	mux.Handle("POST /tenants/{tenant}/{action}", cop.Handler(s.form(s.breakerAction)))
}

// pageData is what every page template gets.
type pageData struct {
	Title    string
	Operator authority.Actor
	CSRF     string
	Nav      string
	Flash    string
	Body     any
}

// uiError is a refusal a page shows with its status.
type uiError struct {
	status int
	msg    string
}

func (e *uiError) Error() string { return e.msg }

func uiBad(format string, args ...any) error {
	return &uiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// pageQuery is the query string of a page that takes at most one value of
// each of its parameters (allowed) and nothing else: anything else is a
// 400 that says what the page takes.
func pageQuery(r *http.Request, takes string, allowed ...string) (url.Values, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, uiBad("malformed query string")
	}
	for name, v := range vals {
		if !slices.Contains(allowed, name) || len(v) != 1 {
			return nil, uiBad("unknown parameter %q (%s)", name, takes)
		}
		if err := event.CheckValue(name, v[0], maxParamBytes); err != nil {
			return nil, uiBad("%s", event.Problem(err))
		}
	}
	return vals, nil
}

// reasonOf is an operator's reason for action (discard, probe, breaker
// close, bulk redrive) by operator.Reason's rule: one that breaks it is a
// 400 naming the action, before any I/O.
func reasonOf(v, action string) (string, error) {
	reason, err := operator.Reason(action, v)
	if err != nil {
		return "", uiBad("%s", strings.TrimPrefix(err.Error(), operator.ErrBadReason.Error()+": "))
	}
	return reason, nil
}

// page authenticates the operator and renders what h returns; h finds
// the operator with actorOf.
func (s *Server) page(h func(r *http.Request) (name, title string, body any, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, ok := s.operator(w, r)
		if !ok {
			return
		}
		r = withActor(r, who)
		csrf := s.csrfToken(w, r)
		name, title, body, err := h(r)
		if err != nil {
			s.uiFail(w, r, who, csrf, err)
			return
		}
		s.render(w, http.StatusOK, name, pageData{Title: title, Operator: who, CSRF: csrf, Nav: name, Flash: flashes[r.URL.Query().Get("done")], Body: body})
	})
}

// form authenticates the operator, checks the CSRF token and runs a
// state-changing action, which answers with where to go next. It is where
// the console enforces roles for its forms: a role that acts on nothing (a
// viewer) is refused (403) before the form is read; what an acting role may
// do with an entry or a breaker, shared/operator's authority rule decides
// on the entry itself (403 too).
func (s *Server) form(h func(w http.ResponseWriter, r *http.Request, who authority.Actor) (next string, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 2<<20)
		who, ok := s.operator(w, r)
		if !ok {
			return
		}
		r = withActor(r, who)
		if !who.Role.Operates() {
			s.log.WarnContext(r.Context(), "form refused: the role acts on nothing", "operator", who.Name, "role", string(who.Role), "path", event.Wire(r.URL.Path))
			s.uiFail(w, r, who, "", &uiError{http.StatusForbidden, fmt.Sprintf("the %s role reads the console and acts on nothing; acting needs operator or approver", who.Role)})
			return
		}
		if !checkCSRF(r) {
			s.log.WarnContext(r.Context(), "form without a valid CSRF token refused", "operator", who.Name, "path", event.Wire(r.URL.Path))
			s.uiFail(w, r, who, "", &uiError{http.StatusForbidden, "the form's CSRF token is missing or stale: reload the page and try again"})
			return
		}
		next, err := h(w, r, who)
		if err != nil {
			s.uiFail(w, r, who, s.csrfToken(w, r), err)
			return
		}
		if next == "" {
			return // h rendered the answer itself
		}
		http.Redirect(w, r, next, http.StatusSeeOther)
	})
}

func (s *Server) operator(w http.ResponseWriter, r *http.Request) (authority.Actor, bool) {
	if s.auth == nil {
		http.Error(w, "no operator authentication configured", http.StatusUnauthorized)
		return authority.Actor{}, false
	}
	who, err := s.auth.Operator(r)
	if err != nil {
		code, msg := http.StatusUnauthorized, http.StatusText(http.StatusUnauthorized)
		switch {
		case errors.Is(err, ErrKeysUnavailable):
			code, msg = http.StatusServiceUnavailable, http.StatusText(http.StatusServiceUnavailable)
		case errors.Is(err, ErrNoRole):
			code, msg = http.StatusForbidden, who.Name+" has no console role: ask for one in console_viewers, console_operators or console_approvers"
		}
		s.log.WarnContext(r.Context(), "operator refused", "error", err.Error(), "path", event.Wire(r.URL.Path))
		http.Error(w, msg, code)
		return authority.Actor{}, false
	}
	return who, true
}

func (s *Server) uiFail(w http.ResponseWriter, r *http.Request, who authority.Actor, csrf string, err error) {
	out := outcome.Of(err) // the status every front door answers with
	code, msg := out.HTTP, err.Error()
	var ue *uiError
	var denied *authority.Denied
	switch {
	case errors.As(err, &ue):
		code, msg = ue.status, ue.msg
	case errors.As(err, &denied):
		msg = "permission denied: " + denied.Reason()
	case out.Kind == outcome.NotFound:
		msg = "not found"
	case out.Kind == outcome.Internal:
		msg = "internal error"
	}
	if code >= http.StatusInternalServerError {
		s.log.ErrorContext(r.Context(), "console page failed", "error", err.Error(), "path", event.Wire(r.URL.Path))
	}
	s.render(w, code, "error", pageData{Title: http.StatusText(code), Operator: who, CSRF: csrf, Body: msg})
}

func (s *Server) render(w http.ResponseWriter, code int, name string, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if err := pages.ExecuteTemplate(w, name+".html", d); err != nil {
		s.log.Error("render page", "page", name, "error", err.Error())
	}
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

// entryData is the entry page.
type entryData struct {
	E *store.Entry
	// Payload is the version Shown (?version=N, ShownParam; else the one
	// the next replay publishes, Next), of Versions. Edit is Next's, the
	// approve form's base.
	Payload    payloadView
	Versions   []versionLine
	Shown      int
	ShownParam bool
	Next       store.PayloadVersion
	Edit       payloadView
	Headers    []headerLine
	Chain      []*store.Entry
	Task       string
	Approvable bool
	Runnable   bool
	Discard    bool
	Probe      bool
	// NotMine says why an action the entry's status offers is not the
	// operator's (the authority rule's refusals), for the forms not shown.
	NotMine    []string
	RawPayload string
	HeaderText string
}

type headerLine struct{ Name, Value string }

func (s *Server) entry(r *http.Request) (string, string, any, error) {
	id, err := pathEntry(r.PathValue("entry"))
	if err != nil {
		return "", "", nil, err
	}
	chunk, err := chunkParam(r)
	if err != nil {
		return "", "", nil, err
	}
	version, err := versionParam(r)
	if err != nil {
		return "", "", nil, uiBad("%v", err)
	}
	e, err := s.store.Get(r.Context(), id)
	if err != nil {
		return "", "", nil, err
	}
	d := entryData{E: e, ShownParam: version != 0}
	var payload []byte
	if d.Versions, payload, d.Shown, err = s.entryVersions(r.Context(), e, version); err != nil {
		return "", "", nil, err
	}
	if d.Payload, err = viewPayload(payload, chunk); err != nil {
		return "", "", nil, uiBad("%v", err)
	}
	if d.Next, err = e.ReplayVersion(); err != nil {
		return "", "", nil, err
	}
	if d.Next.N != d.Shown {
		if payload, err = s.store.VersionPayload(r.Context(), e, d.Next.N); err != nil {
			return "", "", nil, err
		}
	}
	if d.Edit, _ = viewPayload(payload, 1); d.Edit.Editable {
		d.RawPayload = string(payload)
	}
	for name, vs := range e.Headers {
		for _, v := range vs {
			d.Headers = append(d.Headers, headerLine{decodeHeader(name), decodeHeader(v)})
		}
	}
	sortHeaders(d.Headers)
	if e.RootID != "" {
		p, err := s.store.Entries(r.Context(), store.Query{RootID: e.RootID, View: store.ListView, Limit: 50})
		if err != nil {
			return "", "", nil, err
		}
		d.Chain = p.Entries
		sort.SliceStable(d.Chain, func(i, j int) bool { return d.Chain[i].CreatedAt.Before(d.Chain[j].CreatedAt) })
	}
	d.Task = "—"
	if s.tasks != nil && e.TaskName != "" {
		ok, err := s.tasks.Exists(r.Context(), e.TaskName)
		switch {
		case err != nil:
			d.Task = "unknown (" + err.Error() + ")"
		case ok:
			d.Task = "queued"
		default:
			d.Task = "not in the queue"
		}
	}
	if err := s.offerForms(r, e, &d); err != nil {
		return "", "", nil, err
	}
	return "entry", "Entry " + e.ID, d, nil
}

// chunkParam reads the entry page's ?chunk=N (1-based; 1 when absent).
func chunkParam(r *http.Request) (int, error) {
	vs, ok := r.URL.Query()["chunk"]
	if !ok {
		return 1, nil
	}
	if len(vs) != 1 {
		return 0, uiBad("chunk: one value")
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < 1 {
		return 0, uiBad("chunk %q is not a chunk number (1, 2, …)", vs[0])
	}
	return n, nil
}

// decodeHeader shows a stored header name or value as sent (the store
// keeps them encoded, event.EncodeHeader).
func decodeHeader(s string) string {
	d, err := event.DecodeHeader(s)
	if err != nil {
		return s
	}
	return d
}

func has(list []store.Status, st store.Status) bool {
	for _, x := range list {
		if x == st {
			return true
		}
	}
	return false
}

// entryAction runs replay, approve (preview, then confirm), discard and
// probe on an entry.
// flashes are the messages an action's redirect shows (?done=<key>): a
// fixed set, so a link cannot put words of its own on an operator's page.
var flashes = map[string]string{
	"replay-requested":      "replay requested",
	"replay-task-pending":   "replay requested; its task could not be created yet: reconcile's next run creates it (or replay now again)",
	"discarded":             "discarded",
	"probe-sent":            "probe sent",
	"approved":              "approved",
	"approved-task-pending": "approved; its replay task could not be created yet: reconcile's next run creates it (or replay now)",
	"breaker-closed":        "breaker closed",
	"bulk-confirmed":        "bulk redrive confirmed",
	"cancel-asked":          "cancel asked",
}

// recorded is where an action that may leave its replay task uncreated goes:
// back with done, or with pending when the action is recorded but the task
// is not (operator.ErrTaskNotCreated: not an error the operator should
// retry, and not one to hide).
func (s *Server) recorded(r *http.Request, err error, back, done, pending string) (string, error) {
	switch {
	case err == nil:
		return back + "?done=" + done, nil
	case errors.Is(err, operator.ErrTaskNotCreated):
		s.log.WarnContext(r.Context(), "console action recorded, its replay task left to reconcile", "error", err.Error(), "path", event.Wire(r.URL.Path))
		return back + "?done=" + pending, nil
	}
	return "", err
}

func (s *Server) entryAction(w http.ResponseWriter, r *http.Request, who authority.Actor) (string, error) {
	id, err := pathEntry(r.PathValue("entry"))
	if err != nil {
		return "", err
	}
	back, err := consolePath("entries", id)
	if err != nil {
		return "", err
	}
	ctx := r.Context()
	switch r.PathValue("action") {
	case "replay":
		_, err := s.actions.ReplayNow(ctx, store.AllTenants, id, who)
		return s.recorded(r, err, back, "replay-requested", "replay-task-pending")
	case "discard":
		reason, err := reasonOf(r.PostFormValue("reason"), "a discard")
		if err != nil {
			return "", err
		}
		if _, err := s.actions.Discard(ctx, store.AllTenants, id, reason, who); err != nil {
			return "", err
		}
		return back + "?done=discarded", nil
	case "probe":
		reason, err := reasonOf(r.PostFormValue("reason"), "a breaker probe")
		if err != nil {
			return "", err
		}
		_, err = s.actions.ProbeNow(ctx, store.AllTenants, id, who, reason)
		return s.recorded(r, err, back, "probe-sent", "replay-task-pending")
	case "approve":
		return s.approve(w, r, who, id, back)
	}
	return "", &uiError{http.StatusNotFound, "no such action"}
}

// tenantsData is the tenants and breakers page.
type tenantsData struct {
	Breakers []*store.Breaker
	// Override: the operator's role may close a breaker or send a probe.
	Override bool
}

func (s *Server) tenants(r *http.Request) (string, string, any, error) {
	bs, err := s.store.ListBreakers(r.Context(), store.BreakerStates(), 500)
	if err != nil {
		return "", "", nil, err
	}
	sort.Slice(bs, func(i, j int) bool {
		if bs[i].State != bs[j].State {
			return bs[i].State > bs[j].State // open, half_open, closed
		}
		return bs[i].Tenant < bs[j].Tenant
	})
	override := authority.May(actorOf(r), authority.Breaker, authority.Grant{}) == nil
	return "tenants", "Tenants and breakers", tenantsData{Breakers: bs, Override: override}, nil
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
		return "/tenants?done=breaker-closed", nil
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
