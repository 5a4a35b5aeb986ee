package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
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
		return humanDuration(time.Since(t))
	},
	"duration": humanDuration,
	// took is the time from a to b in words.
	"took":    func(a, b time.Time) string { return humanDuration(b.Sub(a)) },
	"plural":  plural,
	"rate":    humanRate,
	"join":    strings.Join,
	"maxRate": func() float64 { return MaxBulkRate },
	// discardable names the statuses a discard applies to (the operator's
	// rule, operator.Discardable).
	"discardable": func() string { return joinNames(operator.Discardable) },
	"pct":         pct,
	"retention":   triage.FormatRetention,
	"add":         func(a, b int) int { return a + b },
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

func (s *Server) routeUI(mux *http.ServeMux) {
	static := http.FileServerFS(assets)
	mux.Handle("GET /static/", static)
	mux.Handle("GET /{$}", s.livePage(s.overview))
	mux.Handle("GET /entries", s.livePage(s.entries))
	mux.Handle("GET /entries/{entry}", s.page(s.entry))
	mux.Handle("GET /entries/{entry}/payload", http.HandlerFunc(s.payloadDownload))
	mux.Handle("GET /tenants", s.livePage(s.tenants))
	mux.Handle("GET /audits", s.page(s.audits))
	mux.Handle("GET /audits/{run}", s.page(s.auditReport))
	mux.Handle("GET /policy", s.page(s.policy))
	mux.Handle("GET /predictions", s.page(s.predictions))
	cop := http.NewCrossOriginProtection()
	mux.Handle("POST /selected-entries", cop.Handler(s.form(s.selectedAction)))
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
	// Refresh is the auto-refresh toggle of a live page (livePage); nil
	// on the others.
	Refresh *refreshLink
}

// refreshEvery is how often a live page reloads itself with auto-refresh
// on (a meta refresh: the console runs no script).
const refreshEvery = 30

// refreshLink is a live page's auto-refresh: on or off, and the link that
// turns it the other way (the page's own query, refresh added or removed).
type refreshLink struct {
	On      bool
	Every   int
	Toggle  template.URL
	Enabled bool // the toggle is shown (a live page)
}

type refreshKey struct{}

// livePage is page for the pages an operator watches (the overview and
// the lists): ?refresh=on reloads them every refreshEvery seconds, and
// their links keep it. The parameter is taken off before h reads the
// query, so no page's own parameter check needs to know it.
func (s *Server) livePage(h func(r *http.Request) (name, title string, body any, err error)) http.Handler {
	inner := s.page(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vals, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			inner.ServeHTTP(w, r) // h refuses the malformed query
			return
		}
		rl := refreshLink{Enabled: true, Every: refreshEvery}
		switch v := vals["refresh"]; {
		case len(v) == 0:
		case len(v) == 1 && (v[0] == "on" || v[0] == "off"):
			rl.On = v[0] == "on"
		default:
			inner.ServeHTTP(w, r) // h refuses refresh as an unknown parameter
			return
		}
		vals.Del("refresh")
		r2 := r.Clone(r.Context())
		r2.URL.RawQuery = vals.Encode()
		vals.Del("done")
		if !rl.On {
			vals.Set("refresh", "on")
		}
		rl.Toggle = template.URL(r.URL.Path)
		if len(vals) > 0 {
			rl.Toggle += template.URL("?" + vals.Encode())
		}
		inner.ServeHTTP(w, r2.WithContext(context.WithValue(r2.Context(), refreshKey{}, &rl)))
	})
}

// refreshOf is the request's auto-refresh (livePage's), for the links a
// page builds itself.
func refreshOf(r *http.Request) refreshLink {
	if rl, ok := r.Context().Value(refreshKey{}).(*refreshLink); ok {
		return *rl
	}
	return refreshLink{}
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
		d := pageData{Title: title, Operator: who, CSRF: csrf, Nav: name, Flash: flashes[r.URL.Query().Get("done")], Body: body}
		if rl, ok := r.Context().Value(refreshKey{}).(*refreshLink); ok {
			d.Refresh = rl
		}
		s.render(w, http.StatusOK, name, d)
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

// flashes are the messages an action's redirect shows (?done=<key>): a
// fixed set, so a link cannot put words of its own on an operator's page.
var flashes = map[string]string{
	"replay-requested":         "replay requested",
	"replay-task-pending":      "replay requested; its task could not be created yet: reconcile's next run creates it (or replay now again)",
	"discarded":                "discarded",
	"probe-sent":               "probe sent",
	"approved":                 "approved",
	"approved-task-pending":    "approved; its replay task could not be created yet: reconcile's next run creates it (or replay now)",
	"breaker-closed":           "breaker closed",
	"breaker-closed-releasing": "breaker closed; this bulk run releases the tenant's held entries, each meeting the gates as any replay",
	"bulk-confirmed":           "bulk redrive confirmed",
	"cancel-asked":             "cancel asked",
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
