// Package cloudtasks is a Cloud Tasks emulator: a server for the real
// google.cloud.tasks.v2 gRPC API (so the official Go client works against it
// unchanged) that stores queues and tasks, optionally durably in a data
// directory, and dispatches HTTP tasks at their schedule time with the
// headers, OIDC tokens, rate limits and retry schedule of the real service.
//
// Google ships no Cloud Tasks emulator; the project's code switches to this
// one when CLOUD_TASKS_EMULATOR_HOST is set (see clientopt.CloudTasksOptions).
package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc"

	"github.com/jsdlq/jsdlq/shared/obs"
)

// Limits of the real service.
const (
	MaxTaskSize             = 1 << 20 // bytes of the serialized task
	MaxScheduleAhead        = 30 * 24 * time.Hour
	DefaultDispatchDeadline = 10 * time.Minute
	MinDispatchDeadline     = 15 * time.Second
	MaxDispatchDeadline     = 30 * time.Minute
	DefaultNameReservation  = time.Hour
	DefaultQueueTombstone   = 72 * time.Hour
	maxHeadersSize          = 80 << 10
	maxURLLength            = 2083
	maxTaskPageSize         = 1000
	maxQueuePageSize        = 9800
)

// ErrClosed is returned by Serve on a Server that has already served.
var ErrClosed = errors.New("cloudtasks: server already served")

// Option configures New.
type Option func(*Server)

// WithClock replaces the wall clock (tests use a FakeClock).
func WithClock(c Clock) Option { return func(s *Server) { s.clock = c } }

// WithLogger sets the logger; dispatches are logged at Info.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithDataDir makes queues, tasks, name reservations and the OIDC signing key
// survive restarts by storing them in dir.
func WithDataDir(dir string) Option { return func(s *Server) { s.dataDir = dir } }

// WithHTTPClient sets the client used for dispatches (default: no redirect
// or timeout policy beyond the task's dispatch deadline).
func WithHTTPClient(c *http.Client) Option { return func(s *Server) { s.httpClient = c } }

// WithNameReservation sets how long the id of a deleted, completed or
// exhausted task stays taken (default one hour, as observed in production).
func WithNameReservation(d time.Duration) Option { return func(s *Server) { s.reservation = d } }

// WithDispatchDeadlineBounds overrides the [15s, 30min] bounds accepted for
// dispatch_deadline, so tests can exercise timeouts quickly.
func WithDispatchDeadlineBounds(lo, hi time.Duration) Option {
	return func(s *Server) { s.minDeadline, s.maxDeadline = lo, hi }
}

// WithQueueTombstone sets how long after a queue was deleted CreateQueue
// refuses its name with FAILED_PRECONDITION (default
// DefaultQueueTombstone, the real service's window of up to three days); 0
// frees the name at once.
func WithQueueTombstone(d time.Duration) Option { return func(s *Server) { s.queueTombstone = d } }

// Server implements cloudtaskspb.CloudTasksServer.
type Server struct {
	cloudtaskspb.UnimplementedCloudTasksServer

	clock          Clock
	log            *slog.Logger
	dataDir        string
	httpClient     *http.Client
	reservation    time.Duration
	minDeadline    time.Duration
	maxDeadline    time.Duration
	queueTombstone time.Duration
	signer         *signer

	wake chan struct{}

	mu            sync.Mutex
	queues        map[string]*queue    // by full name
	deletedQueues map[string]time.Time // full name -> end of tombstone
	reserved      map[string]time.Time // full task name -> end of reservation
	forced        []*dispatchJob       // RunTask dispatches waiting for the scheduler
	seq           uint64
	store         *store
	served        bool
	stopping      bool
}

type queue struct {
	pb       *cloudtaskspb.Queue // with defaults filled, as GetQueue returns it
	tasks    map[string]*task    // by task id
	pending  taskHeap
	running  int
	tokens   float64
	refilled time.Time
}

type task struct {
	pb         *cloudtaskspb.Task // FULL view
	seq        uint64             // creation order, breaks schedule_time ties
	index      int                // position in queue.pending, -1 when not pending
	running    bool
	prevStatus int    // HTTP status of the previous attempt, 0 if it got none
	reason     string // why the previous attempt failed
	execCount  int32  // previous attempts answered with a non-5xx status
	created    time.Time
}

// New builds a Server, loading its state from the data directory if one is
// set. It serves nothing until Serve.
func New(opts ...Option) (*Server, error) {
	s := &Server{
		clock:          realClock{},
		log:            obs.Discard(),
		reservation:    DefaultNameReservation,
		queueTombstone: DefaultQueueTombstone,
		minDeadline:    MinDispatchDeadline,
		maxDeadline:    MaxDispatchDeadline,
		wake:           make(chan struct{}, 1),
		queues:         map[string]*queue{},
		deletedQueues:  map[string]time.Time{},
		reserved:       map[string]time.Time{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.httpClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		s.httpClient = &http.Client{Transport: tr}
	}
	sg, err := loadOrCreateSigner(s.dataDir)
	if err != nil {
		return nil, err
	}
	s.signer = sg
	if s.dataDir != "" {
		st, recs, err := openStore(s.dataDir, s.log)
		if err != nil {
			return nil, err
		}
		if err := s.replay(recs); err != nil {
			st.close()
			return nil, err
		}
		s.store = st
		if err := st.rewrite(s.snapshotLocked()); err != nil {
			st.close()
			return nil, err
		}
	}
	return s, nil
}

// Close releases the data directory of a Server that will not Serve (Serve
// releases it when it returns).
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served = true
	if s.store == nil {
		return nil
	}
	return s.store.close()
}

// Serve answers gRPC on grpcLis and serves the JWKS (clientopt.CloudTasksJWKSPath) and /healthz
// on httpLis (may be nil) until ctx is done, then stops gracefully: in-flight
// dispatches are cancelled and, having been recorded before they were sent,
// are dispatched again by the next run on the same data directory.
func (s *Server) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	s.mu.Lock()
	if s.served {
		s.mu.Unlock()
		return ErrClosed
	}
	s.served = true
	s.mu.Unlock()

	gs := grpc.NewServer(grpc.MaxRecvMsgSize(8 << 20))
	cloudtaskspb.RegisterCloudTasksServer(gs, s)
	hs := &http.Server{Handler: s.signer.httpHandler(), ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 2)
	go func() {
		if err := gs.Serve(grpcLis); err != nil {
			errc <- fmt.Errorf("cloudtasks: grpc serve: %w", err)
		}
	}()
	if httpLis != nil {
		go func() {
			if err := hs.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("cloudtasks: http serve: %w", err)
			}
		}()
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.schedule(runCtx, &wg)
	}()

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
	}
	shutCtx, shutCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer shutCancel()
	_ = hs.Shutdown(shutCtx)

	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	cancel()
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store != nil {
		if cerr := s.store.close(); cerr != nil && err == nil {
			err = fmt.Errorf("cloudtasks: close state: %w", cerr)
		}
	}
	return err
}

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ---- queues ----
