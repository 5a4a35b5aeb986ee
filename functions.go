// Package jsdlq is the Cloud Functions deploy root (SPEC §3). Its init
// registers the three functions itself: a root that only blank-imports
// sub-packages makes the Go buildpack fall back to an old template and fail.
// Registration does no network work; each function builds its clients on
// its first request, once.
package jsdlq

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func init() {
	functions.CloudEvent("Classify", handleClassify)
	functions.HTTP("Replay", handleReplay)
	functions.HTTP("Reconcile", handleReconcile)
}

var (
	// A configuration error is logged once, clearly, and returned for every
	// event: Pub/Sub keeps redelivering (then dead-letters) instead of
	// classify acknowledging events it cannot store.
	classifyHandler = sync.OnceValues(func() (*classify.Handler, error) {
		log := obs.NewLogger(os.Stdout, obs.WithComponent("classify"))
		cfg, err := config.LoadClassify(os.LookupEnv)
		if err != nil {
			log.Error("classify: invalid configuration; events are refused until it is fixed", "error", err.Error())
			return nil, fmt.Errorf("classify: %w", err)
		}
		log = obs.NewLogger(os.Stdout, obs.WithComponent("classify"), obs.WithProject(cfg.Project))
		h, err := classify.Build(context.Background(), cfg, log)
		if err != nil {
			log.Error("classify: cannot build clients", "error", err.Error())
			return nil, err
		}
		return h, nil
	})
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
