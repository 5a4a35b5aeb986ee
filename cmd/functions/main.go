// Command functions serves the jsdlq functions locally through the
// functions framework, each at its own path: /Classify (CloudEvents, and the
// Pub/Sub push JSON of the emulator), /Replay, /Reconcile and every other
// function the deploy root registers. FUNCTION_TARGET is cleared so that all
// are served.
//
// The local push subscription delivers to /Classify/projects/P/topics/T:
// the host turns that push into the CloudEvent Eventarc delivers in
// production (binary mode, source //pubsub.googleapis.com/projects/P/topics/T)
// and hands it to /Classify. A push to /Classify itself still works, but the
// framework then converts it on its own and, with no topic in the path,
// prints a plain-text warning ("failed to extract Pub/Sub topic name") into
// the JSON log stream.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	_ "github.com/jsdlq/jsdlq" // registers the functions
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func main() { obs.Command("functions-host", run) }

func run(ctx context.Context, log *slog.Logger, _ []string) error {
	cfg, err := config.LoadFunctions(os.LookupEnv)
	if err != nil {
		return err
	}
	// With FUNCTION_TARGET set the framework serves one function at "/".
	os.Unsetenv("FUNCTION_TARGET")
	host := cfg.Host
	base := "http://" + net.JoinHostPort(loopbackFor(host), strconv.Itoa(cfg.Port))
	if err := funcframework.RegisterHTTPFunctionContext(ctx, pushPrefix, pushAsCloudEvent(base+"/Classify", log)); err != nil {
		return fmt.Errorf("register %s: %w", pushPrefix, err)
	}
	errc := make(chan error, 1)
	go func() {
		log.Info("serving the registered functions at /<Name>, Pub/Sub pushes at "+pushPrefix+"projects/P/topics/T", "addr", net.JoinHostPort(host, strconv.Itoa(cfg.Port)))
		errc <- funcframework.StartHostPort(host, strconv.Itoa(cfg.Port))
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		// The framework owns its http.Server and offers no Shutdown; the
		// functions are idempotent (their callers retry), so exiting here
		// loses no work.
		log.Info("stopping on signal")
		return nil
	}
}
