// Command functions serves the three jsdlq functions locally through the
// functions framework, each at its own path: /Classify (CloudEvents, and the
// Pub/Sub push JSON of the emulator, which the framework converts), /Replay
// and /Reconcile. FUNCTION_TARGET is cleared so that all three are served.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	_ "github.com/jsdlq/jsdlq" // registers Classify, Replay and Reconcile
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func main() {
	log := obs.NewLogger(os.Stderr, obs.WithComponent("functions-host"))
	if err := run(log); err != nil {
		log.Error("functions host failed", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	cfg, err := config.LoadFunctions(os.LookupEnv)
	if err != nil {
		return err
	}
	// With FUNCTION_TARGET set the framework serves one function at "/".
	os.Unsetenv("FUNCTION_TARGET")
	host := cfg.Host
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		log.Info("serving /Classify, /Replay, /Reconcile", "addr", net.JoinHostPort(host, strconv.Itoa(cfg.Port)))
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
