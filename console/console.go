// Package console is jsdlq's front door (docs/console.md): the operator web
// console and the tenant recovery API, served by cmd/console. It reads through
// the store's query API and acts only through shared/operator, so every action
// meets the same gates (docs/runbook.md, "The gates and their overrides") and
// the same authority rule (shared/authority), and writes history with who
// acted and in which role: the operator's verified Google identity in its
// console role (roles.go), or the tenant's key.
//
// The tenant API (api.go) is scoped by the key's tenant inside every query
// and action; another tenant's entry answers 404 exactly like a missing one.
// The operator UI (ui.go and a file per page) is server-rendered html/template with embedded
// assets; every state-changing form carries a CSRF token (csrf.go).
package console

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// Actions is what the console does to entries and breakers, and the
// authority rule they meet, which the pages ask to show each actor only the
// forms it may use (*operator.Operator).
type Actions interface {
	Approve(ctx context.Context, tenant, id string, ed operator.Edits) (*store.Entry, error)
	Discard(ctx context.Context, tenant, id, reason string, by authority.Actor) (*store.Entry, error)
	ReplayNow(ctx context.Context, tenant, id string, by authority.Actor) (*store.Entry, error)
	ReplayNowIn(ctx context.Context, tenant, id string, by authority.Actor, asked operator.Asked) (*store.Entry, error)
	ProbeNow(ctx context.Context, tenant, id string, by authority.Actor, reason string) (*store.Entry, error)
	CloseBreaker(ctx context.Context, tenant string, by authority.Actor, reason string) (*store.Breaker, error)
	May(ctx context.Context, by authority.Actor, act authority.Action, e *store.Entry) error
}

// TaskState tells whether a replay task exists in Cloud Tasks
// (*tasks.Scheduler); the entry page shows it.
type TaskState interface {
	Exists(ctx context.Context, name string) (bool, error)
}

// Server serves the console.
type Server struct {
	store   *store.Store
	actions Actions
	auth    Authenticator
	tasks   TaskState
	hooks   *webhook.Guard
	secrets hooksecret.Box
	hosts   map[hostPort]bool
	log     *slog.Logger
	ui, api bool
	secure  bool
	now     func() time.Time
	bulk    bulkRunner
	// triageAuth and triage serve the triage endpoint (triage.go).
	triageAuth TriageAuth
	triage     agentkit.Answerer
}

// Option configures New.
type Option func(*Server)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithTaskState lets the entry page show its Cloud Tasks task.
func WithTaskState(t TaskState) Option { return func(s *Server) { s.tasks = t } }

// WithServe chooses what is served (default both).
func WithServe(ui, api bool) Option { return func(s *Server) { s.ui, s.api = ui, api } }

// WithClock sets the clock of the overview's windows (tests pin it).
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithSecureCookies marks the CSRF cookie Secure (on Google Cloud, where
// the console is served over HTTPS only).
func WithSecureCookies(on bool) Option { return func(s *Server) { s.secure = on } }

// New returns a console over st whose actions go through act and whose
// operators auth names (nil: the UI answers 401 to everyone).
func New(st *store.Store, act Actions, auth Authenticator, opts ...Option) *Server {
	s := &Server{store: st, actions: act, auth: auth, log: slog.New(slog.DiscardHandler), ui: true, api: true, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	s.bulk.defaults()
	return s
}

// Handler routes the console's requests.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	if s.api {
		s.routeAPI(mux)
	}
	if s.ui {
		s.routeUI(mux)
		s.routeBulk(mux)
	}
	return securityHeaders(s.checkHost(mux))
}

// securityHeaders are sent with every answer: no framing, no sniffing, no
// script but the console's own (static/console.js: the copy button; every
// page works without it), no referrer leaking ids.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
