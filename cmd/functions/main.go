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
//
// The functions framework owns its http.Server (funcframework.StartHostPort
// calls http.ListenAndServe, with no timeout at all), so it listens on a
// private loopback port only, and the host's own server, with the read,
// header and write timeouts and the per-request deadline of obs.Listen
// (FUNCTIONS_REQUEST_TIMEOUT), forwards every request to it: a slow client
// or a function past its deadline is cut off at the front, and the
// forwarded request's end cancels the function's context.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	_ "github.com/jsdlq/jsdlq" // registers the functions
	"github.com/jsdlq/jsdlq/shared/obs"
)

func main() { obs.Command("functions-host", run) }

func run(ctx context.Context, log *slog.Logger, _ []string) error {
	cfg, err := loadConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	// With FUNCTION_TARGET set the framework serves one function at "/".
	os.Unsetenv("FUNCTION_TARGET")
	private, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	inner := "http://" + private
	if err := funcframework.RegisterHTTPFunctionContext(ctx, pushPrefix, pushAsCloudEvent(inner+"/Classify", log)); err != nil {
		return fmt.Errorf("register %s: %w", pushPrefix, err)
	}
	errc := make(chan error, 1)
	go func() {
		host, port, _ := net.SplitHostPort(private)
		errc <- funcframework.StartHostPort(host, port)
	}()
	if err := awaitListening(ctx, private, errc); err != nil {
		return err
	}
	front, err := obs.Listen(cfg.Host, cfg.Port, forwardTo(inner), obs.Limits{Request: cfg.RequestTimeout})
	if err != nil {
		return err
	}
	log.Info("serving the registered functions at /<Name>, Pub/Sub pushes at "+pushPrefix+"projects/P/topics/T",
		"addr", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)), "request_timeout", cfg.RequestTimeout.String())
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case err := <-front.Failed():
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		// The framework offers no Shutdown; the functions are idempotent
		// (their callers retry), so exiting after the front's grace loses
		// no work.
		log.Info("stopping on signal")
		return front.Shutdown(5 * time.Second)
	}
}

// freeLoopbackPort is a loopback address no one listens on now, for the
// framework's private server.
func freeLoopbackPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a private port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// awaitListening waits until the framework accepts connections on addr,
// so the front never forwards to a port not yet open.
func awaitListening(ctx context.Context, addr string, errc <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case err := <-errc:
			return fmt.Errorf("serve the functions on %s: %w", addr, err)
		case <-ctx.Done():
			return fmt.Errorf("the functions framework did not listen on %s: %w", addr, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// forwardTo is the front's handler: every request, as it came, to the
// framework at inner. The request's context (its deadline) goes with it.
func forwardTo(inner string) http.Handler {
	target, _ := url.Parse(inner)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
	}
}
