package jsdlq

import (
	"context"
	"fmt"
	"os"

	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
)

// newClassifyHandler builds the classify function from its environment; it
// runs once, on the first event. A configuration error is logged once,
// clearly, and returned for every event: Pub/Sub keeps redelivering (then
// dead-letters) instead of classify acknowledging events it cannot store.
func newClassifyHandler() (*classify.Handler, error) {
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
}
