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
	if err != nil {
		log.Error("reconcile: invalid configuration; every run is refused until it is fixed", "error", err.Error())
		return obs.Middleware(refuse(log, "reconcile", err))
	}
	log = obs.NewLogger(os.Stdout, obs.WithComponent("reconcile"), obs.WithProject(cfg.Project))
	h, err := reconcile.Build(context.Background(), cfg, log)
	if err != nil {
		log.Error("reconcile: cannot build clients; every run is refused", "error", err.Error())
		return obs.Middleware(refuse(log, "reconcile", err))
	}
	return obs.Middleware(h)
}
