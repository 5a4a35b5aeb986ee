package jsdlq

import (
	"context"
	"net/http"
	"os"

	"github.com/jsdlq/jsdlq/functions/reconcile"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
)

// newReconcileHandler builds the reconcile function from its environment; it
// runs once, on the first request (functions.go calls it through
// sync.OnceValue). A configuration error is logged once, clearly, and every
// request is answered 500, so Cloud Scheduler shows the job failing instead
// of an audit that silently does nothing.
func newReconcileHandler() http.Handler {
	log := obs.NewLogger(os.Stdout, obs.WithComponent("reconcile"))
	cfg, err := config.LoadReconcile(os.LookupEnv)
	r := config.NewReader(os.LookupEnv)
	names := reconcile.Names{
		AdvisoryStream: r.String("ADVISORY_STREAM", "DLQ_ADVISORIES"),
		RecordStream:   r.String("RECORD_STREAM", "DLQ_RECORDS"),
	}
	if err != nil {
		log.Error("reconcile: invalid configuration; every run is refused until it is fixed", "error", err.Error())
		return refuseReconcile("reconcile: invalid configuration (see the function's log)")
	}
	log = obs.NewLogger(os.Stdout, obs.WithComponent("reconcile"), obs.WithProject(cfg.Project))
	h, err := reconcile.Build(context.Background(), cfg, names, log)
	if err != nil {
		log.Error("reconcile: cannot build clients; every run is refused", "error", err.Error())
		return refuseReconcile("reconcile: cannot build clients (see the function's log)")
	}
	return obs.Middleware(h)
}

// refuseReconcile answers every request 500 with msg.
func refuseReconcile(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, msg, http.StatusInternalServerError)
	})
}
