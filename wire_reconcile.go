package jsdlq

import (
	"net/http"
	"os"

	"github.com/jsdlq/jsdlq/functions/reconcile"
	"github.com/jsdlq/jsdlq/shared/obs"
)

// newReconcileHandler builds the reconcile function from its environment; it
// runs once, on the first request.
func newReconcileHandler() http.Handler {
	return obs.Middleware(reconcile.New(reconcile.Config{}, reconcile.Deps{Logger: obs.NewLogger(os.Stdout, obs.WithComponent("reconcile"))}))
}
