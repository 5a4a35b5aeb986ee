// Package jsdlq is the Cloud Functions deploy root (docs/architecture.md, "Why
// it is built this way"). Its init registers the functions itself: a root that
// only blank-imports sub-packages makes the Go buildpack fall back to an old
// template and fail. Registration does no network work; each function builds
// itself from its environment on its first request, once.
package jsdlq

import (
	"context"
	"net/http"
	"os"
	"sync"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/functions/deliver"
	"github.com/jsdlq/jsdlq/functions/reconcile"
	"github.com/jsdlq/jsdlq/functions/replay"
)

func init() {
	functions.CloudEvent("Classify", handleClassify)
	functions.HTTP("Replay", handleReplay)
	functions.HTTP("Reconcile", handleReconcile)
	functions.HTTP("Deliver", handleDeliver)
}

var (
	classifyHandler = sync.OnceValues(func() (*classify.Handler, error) {
		return classify.FromEnv(context.Background(), os.LookupEnv, os.Stdout)
	})
	replayHandler = sync.OnceValue(func() http.Handler {
		return replay.FromEnv(context.Background(), os.LookupEnv, os.Stdout)
	})
	reconcileHandler = sync.OnceValue(func() http.Handler {
		return reconcile.FromEnv(context.Background(), os.LookupEnv, os.Stdout)
	})
	deliverHandler = sync.OnceValue(func() http.Handler {
		return deliver.FromEnv(context.Background(), os.LookupEnv, os.Stdout)
	})
)

// handleClassify returns a configuration error for every event, so Pub/Sub
// keeps redelivering (then dead-letters) instead of losing events.
func handleClassify(ctx context.Context, e event.Event) error {
	h, err := classifyHandler()
	if err != nil {
		return err
	}
	return h.Handle(ctx, e)
}

func handleReplay(w http.ResponseWriter, r *http.Request) { replayHandler().ServeHTTP(w, r) }

func handleReconcile(w http.ResponseWriter, r *http.Request) { reconcileHandler().ServeHTTP(w, r) }

func handleDeliver(w http.ResponseWriter, r *http.Request) { deliverHandler().ServeHTTP(w, r) }
