// Package replay is the replay function (SPEC §9).
package replay

import (
	"log/slog"
	"net/http"
)

// Config is what replay reads from its environment.
type Config struct{}

// Deps are the clients replay uses.
type Deps struct {
	Logger *slog.Logger
}

// Handler serves the replay function.
type Handler struct {
	log *slog.Logger
}

// New returns a Handler.
func New(_ Config, deps Deps) *Handler {
	return &Handler{log: deps.Logger}
}

// ServeHTTP is not built yet: it answers 501, never a fake success, so that a
// caller (Cloud Tasks, Cloud Scheduler) sees the failure.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.log.WarnContext(r.Context(), "replay: not implemented yet", "method", r.Method, "path", r.URL.Path)
	http.Error(w, "replay: not implemented yet", http.StatusNotImplemented)
}
