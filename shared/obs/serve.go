package obs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// Command runs a long-running command (a Cloud Run container or a local
// server): a JSON logger for component on stderr, a context cancelled on
// SIGTERM (Cloud Run's stop signal) or an interrupt, and exit status 1 with the
// error logged when run fails. The containers' mains are this one line, so
// they stop the same way.
func Command(component string, run func(ctx context.Context, log *slog.Logger, args []string) error) {
	log := NewLogger(os.Stderr, WithComponent(component))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, log, os.Args[1:])
	stop()
	if err != nil {
		log.Error(component+" failed", "error", err)
		os.Exit(1)
	}
}

// Server is an HTTP server started by Listen: the handler behind Middleware,
// so every request's log lines carry its trace.
type Server struct {
	hs   *http.Server
	ln   net.Listener
	done chan error
}

// Listen binds host:port (host "" is every interface; Cloud Run needs that)
// and serves h in the background until Shutdown.
func Listen(host string, port int, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listen on port %d: %w", port, err)
	}
	s := &Server{
		hs:   &http.Server{Handler: Middleware(h), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() {
		err := s.hs.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Failed delivers the error that stopped the server on its own (never one
// caused by Shutdown).
func (s *Server) Failed() <-chan error { return s.done }

// Shutdown stops accepting requests and waits up to grace for those in
// flight: Cloud Run gives a container ten seconds after SIGTERM.
func (s *Server) Shutdown(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return s.hs.Shutdown(ctx)
}
