// Package jsdlq is the Cloud Functions deploy root (SPEC §3). Its init
// registers the three functions itself: a root that only blank-imports
// sub-packages makes the Go buildpack fall back to an old template and fail.
// Registration does no network work; each function builds its clients on
// its first request, once.
package jsdlq

import (
	"context"
	"net/http"
	"sync"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"
)

func init() {
	functions.CloudEvent("Classify", handleClassify)
	functions.HTTP("Replay", handleReplay)
	functions.HTTP("Reconcile", handleReconcile)
}

var (
	classifyHandler  = sync.OnceValues(newClassifyHandler)
	replayHandler    = sync.OnceValue(newReplayHandler)
	reconcileHandler = sync.OnceValue(newReconcileHandler)
)

func handleClassify(ctx context.Context, e event.Event) error {
	h, err := classifyHandler()
	if err != nil {
		return err
	}
	return h.Handle(ctx, e)
}

func handleReplay(w http.ResponseWriter, r *http.Request) { replayHandler().ServeHTTP(w, r) }

func handleReconcile(w http.ResponseWriter, r *http.Request) { reconcileHandler().ServeHTTP(w, r) }
