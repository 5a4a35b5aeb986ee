// Package jsdlq is the Cloud Functions deploy root (SPEC §3). Its init
// registers the three functions itself: a root that only blank-imports
// sub-packages makes the Go buildpack fall back to an old template and fail.
// Registration does no network work; each function builds its clients on
// its first request, once.
package jsdlq

import (
	"context"
	"net/http"
	"os"
	"sync"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func init() {
	functions.CloudEvent("Classify", handleClassify)
	functions.HTTP("Replay", handleReplay)
	functions.HTTP("Reconcile", handleReconcile)
}

var (
	classifyHandler = sync.OnceValue(func() *classify.Handler {
		return classify.New(classify.Config{}, classify.Deps{Logger: obs.NewLogger(os.Stdout, obs.WithComponent("classify"))})
	})
	replayHandler    = sync.OnceValue(newReplayHandler)
	reconcileHandler = sync.OnceValue(newReconcileHandler)
)

func handleClassify(ctx context.Context, e event.Event) error {
	return classifyHandler().Handle(ctx, e)
}

func handleReplay(w http.ResponseWriter, r *http.Request) { replayHandler().ServeHTTP(w, r) }

func handleReconcile(w http.ResponseWriter, r *http.Request) { reconcileHandler().ServeHTTP(w, r) }
