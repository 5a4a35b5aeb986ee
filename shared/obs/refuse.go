package obs

import (
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
