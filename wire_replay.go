package jsdlq

import (
	"context"
	"net/http"
	"os"

	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
)

// newReplayHandler builds the replay function from its environment; it runs
// once, on the first request. A configuration error is logged once and
// answered 500 on every request: Cloud Tasks keeps the task and retries it,
// so nothing is lost while the deployment is fixed.
func newReplayHandler() http.Handler {
	log := obs.NewLogger(os.Stdout, obs.WithComponent("replay"))
	cfg, err := config.LoadReplay(os.LookupEnv)
	if err != nil {
		log.Error("replay: invalid configuration; tasks are refused with 500 until it is fixed", "error", err.Error())
		return obs.Middleware(refuse(log, "replay", err))
	}
	log = obs.NewLogger(os.Stdout, obs.WithComponent("replay"), obs.WithProject(cfg.Project))
	h, err := replay.Build(context.Background(), cfg, log)
	if err != nil {
		log.Error("replay: cannot build clients; tasks are refused with 500", "error", err.Error())
		return obs.Middleware(refuse(log, "replay", err))
	}
	return obs.Middleware(h)
}
