package obs

import (
	"io"
	"log/slog"
	"net/http"
)

// Refuse answers every request 500 for a function that could not be set
// up, logging why each time without telling the caller: the caller (Cloud
// Tasks, Cloud Scheduler) keeps its work and retries, so nothing is lost
// while the deployment is fixed.
func Refuse(log *slog.Logger, function string, err error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.ErrorContext(r.Context(), function+": request refused: the function is not configured", "error", err.Error())
		http.Error(w, function+": not configured (see the function's logs)", http.StatusInternalServerError)
	})
}

// HTTPFunction builds an HTTP function's handler from its configuration,
// logging to logs as component: load reads the configuration (and names
// the project for the log), build makes the handler. When either fails the
// reason is logged once and every request is refused with 500 (Refuse):
// nothing is lost while the deployment is fixed. The handler is wrapped in
// Middleware either way.
func HTTPFunction[C any](logs io.Writer, component string, load func() (C, string, error), build func(C, *slog.Logger) (http.Handler, error)) http.Handler {
	log := NewLogger(logs, WithComponent(component))
	cfg, project, err := load()
	if err != nil {
		log.Error(component+": invalid configuration; requests are refused with 500 until it is fixed", "error", err.Error())
		return Middleware(Refuse(log, component, err))
	}
	log = NewLogger(logs, WithComponent(component), WithProject(project))
	h, err := build(cfg, log)
	if err != nil {
		log.Error(component+": cannot build clients; requests are refused with 500", "error", err.Error())
		return Middleware(Refuse(log, component, err))
	}
	return Middleware(h)
}
