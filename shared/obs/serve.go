package obs

import (
	"cmp"
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
// so every request's log lines carry its trace, and behind Bounded, so no
// request holds a connection or a handler for ever.
type Server struct {
	hs   *http.Server
	ln   net.Listener
	done chan error
}

// Default bounds of a server Listen starts (docs/configuration.md).
const (
	// DefaultReadHeaderTimeout bounds the request line and headers: a
	// client that sends them a byte at a time (slow loris) is cut off.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds the whole request, body included.
	DefaultReadTimeout = 30 * time.Second
	// DefaultRequestTimeout bounds a handler (Bounded): its context ends
	// and the client gets a 503.
	DefaultRequestTimeout = 60 * time.Second
	// writeGrace is how much longer than the handler's deadline the
	// answer may take to write, so the 503 of a handler past its deadline
	// still reaches the client.
	writeGrace = 5 * time.Second
)

// Limits are a server's bounds; zero fields take the defaults.
type Limits struct {
	ReadHeader time.Duration // DefaultReadHeaderTimeout
	Read       time.Duration // DefaultReadTimeout
	// Request is a handler's deadline (DefaultRequestTimeout); the write
	// timeout is this plus a few seconds.
	Request time.Duration
}

func (l Limits) withDefaults() Limits {
	l.ReadHeader = cmp.Or(l.ReadHeader, DefaultReadHeaderTimeout)
	l.Read = cmp.Or(l.Read, DefaultReadTimeout)
	l.Request = cmp.Or(l.Request, DefaultRequestTimeout)
	return l
}

// Bounded runs h with a deadline of d on each request (an earlier one the
// request carries stays): the request's context ends at the deadline, so
// its I/O stops, and the client gets a 503 then even if h does not return.
func Bounded(h http.Handler, d time.Duration) http.Handler {
	return http.TimeoutHandler(h, d, "the request did not finish within its deadline\n")
}

// NewServer is the http.Server Listen serves h with: Middleware, Bounded
// by lim.Request, and every connection's read, header, write and idle
// timeouts set from lim.
func NewServer(h http.Handler, lim Limits) *http.Server {
	lim = lim.withDefaults()
	return &http.Server{
		Handler:           Middleware(Bounded(h, lim.Request)),
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       max(lim.Read, lim.ReadHeader),
		WriteTimeout:      lim.Request + writeGrace,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// Listen binds host:port (host "" is every interface; Cloud Run needs that)
// and serves h in the background until Shutdown, bounded by lim
// (NewServer).
func Listen(host string, port int, h http.Handler, lim Limits) (*Server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listen on port %d: %w", port, err)
	}
	s := &Server{
		hs:   NewServer(h, lim),
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
