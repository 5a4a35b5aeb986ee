package jsdlq

import (
	"net/http"
	"os"

	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/shared/obs"
)

// newReplayHandler builds the replay function from its environment; it runs
// once, on the first request.
func newReplayHandler() http.Handler {
	return obs.Middleware(replay.New(replay.Config{}, replay.Deps{Logger: obs.NewLogger(os.Stdout, obs.WithComponent("replay"))}))
}
