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
	"container/heap"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

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

func (s *Server) CreateQueue(ctx context.Context, req *cloudtaskspb.CreateQueueRequest) (*cloudtaskspb.Queue, error) {
	if err := parseLocation(req.GetParent()); err != nil {
		return nil, err
	}
	in := req.GetQueue()
	if in == nil {
		return nil, status.Error(codes.InvalidArgument, "queue is required")
	}
	if _, err := parseQueueName(in.GetName()); err != nil {
		return nil, err
	}
	if parentOf(in.GetName(), "/queues/") != req.GetParent() {
		return nil, status.Errorf(codes.InvalidArgument, "queue %q is not in parent %q", in.GetName(), req.GetParent())
	}
	pb, err := newQueuePB(in)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.queues[pb.Name]; ok {
		return nil, status.Error(codes.AlreadyExists, msgQueueExists)
	}
	if err := s.checkTombstoneLocked(pb.Name); err != nil {
		return nil, err
	}
	if err := s.persistLocked(queueRecord(pb)); err != nil {
		return nil, err
	}
	s.addQueueLocked(pb)
	return proto.Clone(pb).(*cloudtaskspb.Queue), nil
}

func newQueuePB(in *cloudtaskspb.Queue) (*cloudtaskspb.Queue, error) {
	if err := validateRateLimits(in.GetRateLimits()); err != nil {
		return nil, err
	}
	if err := validateRetryConfig(in.GetRetryConfig()); err != nil {
		return nil, err
	}
	pb := proto.Clone(in).(*cloudtaskspb.Queue)
	pb.State = cloudtaskspb.Queue_RUNNING
	pb.PurgeTime = nil
	pb.RateLimits = withRateDefaults(pb.RateLimits)
	pb.RetryConfig = withRetryDefaults(pb.RetryConfig)
	return pb, nil
}

func (s *Server) checkTombstoneLocked(name string) error {
	if until, ok := s.deletedQueues[name]; ok {
		if s.clock.Now().Before(until) {
			return status.Error(codes.FailedPrecondition, msgQueueTombstone)
		}
		delete(s.deletedQueues, name)
	}
	return nil
}

func (s *Server) addQueueLocked(pb *cloudtaskspb.Queue) {
	q := &queue{pb: pb, tasks: map[string]*task{}, tokens: float64(pb.RateLimits.MaxBurstSize), refilled: s.clock.Now()}
	s.queues[pb.Name] = q
	delete(s.deletedQueues, pb.Name)
	s.poke()
}

func (s *Server) GetQueue(ctx context.Context, req *cloudtaskspb.GetQueueRequest) (*cloudtaskspb.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(req.GetName())
	if err != nil {
		return nil, err
	}
	return proto.Clone(q.pb).(*cloudtaskspb.Queue), nil
}

// queueLocked resolves a queue name: INVALID_ARGUMENT when malformed,
// NOT_FOUND when absent.
func (s *Server) queueLocked(name string) (*queue, error) {
	if _, err := parseQueueName(name); err != nil {
		return nil, err
	}
	q, ok := s.queues[name]
	if !ok {
		// A queue in its tombstone window is as absent as any other.
		return nil, status.Error(codes.NotFound, msgQueueNotFound)
	}
	return q, nil
}

func (s *Server) ListQueues(ctx context.Context, req *cloudtaskspb.ListQueuesRequest) (*cloudtaskspb.ListQueuesResponse, error) {
	if err := parseLocation(req.GetParent()); err != nil {
		return nil, err
	}
	want, err := parseStateFilter(req.GetFilter())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	size, after, err := pageArgs(req.GetPageSize(), req.GetPageToken(), maxQueuePageSize)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names, next := page(s.queues, after, size, func(name string, q *queue) bool {
		return parentOf(name, "/queues/") == req.GetParent() && (want == cloudtaskspb.Queue_STATE_UNSPECIFIED || q.pb.State == want)
	})
	resp := &cloudtaskspb.ListQueuesResponse{NextPageToken: next}
	for _, name := range names {
		resp.Queues = append(resp.Queues, proto.Clone(s.queues[name].pb).(*cloudtaskspb.Queue))
	}
	return resp, nil
}

func (s *Server) UpdateQueue(ctx context.Context, req *cloudtaskspb.UpdateQueueRequest) (*cloudtaskspb.Queue, error) {
	in := req.GetQueue()
	if in == nil {
		return nil, status.Error(codes.InvalidArgument, "queue is required")
	}
	if _, err := parseQueueName(in.GetName()); err != nil {
		return nil, err
	}
	if err := validateRateLimits(in.GetRateLimits()); err != nil {
		return nil, err
	}
	if err := validateRetryConfig(in.GetRetryConfig()); err != nil {
		return nil, err
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		paths = []string{"app_engine_routing_override", "http_target", "rate_limits", "retry_config", "stackdriver_logging_config"}
	}
	for _, p := range paths {
		switch p {
		case "name", "state", "purge_time":
			return nil, status.Errorf(codes.InvalidArgument, "update_mask path %q cannot be updated", p)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, exists := s.queues[in.Name]
	var pb *cloudtaskspb.Queue
	if exists {
		pb = proto.Clone(q.pb).(*cloudtaskspb.Queue)
	} else {
		if err := s.checkTombstoneLocked(in.Name); err != nil {
			return nil, err
		}
		pb = &cloudtaskspb.Queue{Name: in.Name}
	}
	for _, p := range paths {
		if err := copyPath(pb, in, p); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	pb.RateLimits = withRateDefaults(pb.RateLimits)
	pb.RetryConfig = withRetryDefaults(pb.RetryConfig)
	if err := validateRetryConfig(pb.RetryConfig); err != nil {
		return nil, err
	}
	if !exists {
		pb.State = cloudtaskspb.Queue_RUNNING
	}
	if err := s.persistLocked(queueRecord(pb)); err != nil {
		return nil, err
	}
	if !exists {
		s.addQueueLocked(pb)
	} else {
		q.pb = pb
		q.tokens = min(q.tokens, float64(pb.RateLimits.MaxBurstSize))
		s.poke()
	}
	return proto.Clone(pb).(*cloudtaskspb.Queue), nil
}

func (s *Server) DeleteQueue(ctx context.Context, req *cloudtaskspb.DeleteQueueRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(req.GetName())
	if status.Code(err) == codes.NotFound {
		return nil, status.Error(codes.NotFound, msgNotFound)
	}
	if err != nil {
		return nil, err
	}
	until := s.clock.Now().Add(s.queueTombstone)
	if err := s.persistLocked(record{Op: opDelQueue, Name: q.pb.Name, Until: until}); err != nil {
		return nil, err
	}
	s.dropQueueLocked(q.pb.Name, until)
	return &emptypb.Empty{}, nil
}

func (s *Server) dropQueueLocked(name string, until time.Time) {
	delete(s.queues, name)
	if s.queueTombstone > 0 {
		s.deletedQueues[name] = until
	}
}

func (s *Server) PurgeQueue(ctx context.Context, req *cloudtaskspb.PurgeQueueRequest) (*cloudtaskspb.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(req.GetName())
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	pb := proto.Clone(q.pb).(*cloudtaskspb.Queue)
	pb.PurgeTime = timestamppb.New(now.Truncate(time.Microsecond))
	recs := []record{queueRecord(pb)}
	var purged []*task
	for _, t := range q.tasks {
		if !t.created.After(now) {
			purged = append(purged, t)
			recs = append(recs, record{Op: opDelTask, Name: t.pb.Name, Until: now.Add(s.reservation)})
		}
	}
	if err := s.persistLocked(recs...); err != nil {
		return nil, err
	}
	q.pb = pb
	for _, t := range purged {
		s.removeTaskLocked(q, t, now)
	}
	return proto.Clone(pb).(*cloudtaskspb.Queue), nil
}

func (s *Server) PauseQueue(ctx context.Context, req *cloudtaskspb.PauseQueueRequest) (*cloudtaskspb.Queue, error) {
	return s.setState(req.GetName(), cloudtaskspb.Queue_PAUSED)
}

func (s *Server) ResumeQueue(ctx context.Context, req *cloudtaskspb.ResumeQueueRequest) (*cloudtaskspb.Queue, error) {
	return s.setState(req.GetName(), cloudtaskspb.Queue_RUNNING)
}

// DisableQueue puts a queue in the DISABLED state, which the real service
// enters only when a queue.yaml upload omits the queue; the API has no call
// for it. Tasks can still be added to a disabled queue but are not
// dispatched, and Pause/Resume answer FAILED_PRECONDITION.
func (s *Server) DisableQueue(name string) error {
	_, err := s.setState(name, cloudtaskspb.Queue_DISABLED)
	return err
}

func (s *Server) setState(name string, st cloudtaskspb.Queue_State) (*cloudtaskspb.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(name)
	if err != nil {
		return nil, err
	}
	if q.pb.State == cloudtaskspb.Queue_DISABLED && st != cloudtaskspb.Queue_DISABLED {
		return nil, status.Errorf(codes.FailedPrecondition, "queue %s is disabled", name)
	}
	pb := proto.Clone(q.pb).(*cloudtaskspb.Queue)
	pb.State = st
	if err := s.persistLocked(queueRecord(pb)); err != nil {
		return nil, err
	}
	q.pb = pb
	s.poke()
	return proto.Clone(pb).(*cloudtaskspb.Queue), nil
}

// ---- tasks ----

func (s *Server) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest) (*cloudtaskspb.Task, error) {
	queueName := req.GetParent()
	if _, err := parseQueueName(queueName); err != nil {
		return nil, err
	}
	in := req.GetTask()
	if in == nil {
		return nil, status.Error(codes.InvalidArgument, "task is required")
	}
	if in.GetAppEngineHttpRequest() != nil {
		return nil, status.Error(codes.Unimplemented, "the emulator dispatches HTTP tasks only; App Engine tasks are not supported")
	}
	if err := validateHTTPRequest(in.GetHttpRequest()); err != nil {
		return nil, err
	}
	if err := validateRetryConfig(in.GetRetryConfig()); err != nil {
		return nil, err
	}
	if in.GetName() != "" {
		q, _, err := parseTaskName(in.GetName())
		if err != nil {
			return nil, err
		}
		if q != queueName {
			return nil, status.Errorf(codes.InvalidArgument, msgOtherQueue, queueName, q)
		}
	}
	deadline := DefaultDispatchDeadline
	if d := in.GetDispatchDeadline(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "dispatch_deadline: %v", err)
		}
		deadline = d.AsDuration().Truncate(time.Millisecond)
		if deadline < s.minDeadline || deadline > s.maxDeadline {
			return nil, status.Errorf(codes.InvalidArgument, "dispatch_deadline must be in [%v, %v], got %v", s.minDeadline, s.maxDeadline, deadline)
		}
	}
	if in.GetScheduleTime() != nil {
		if err := in.GetScheduleTime().CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "schedule_time: %v", err)
		}
	}
	if n := proto.Size(in); n > MaxTaskSize {
		return nil, status.Errorf(codes.InvalidArgument, "task size %d bytes exceeds the maximum of %d bytes", n, MaxTaskSize)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(queueName)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	when := now
	if st := in.GetScheduleTime(); st != nil {
		if t := st.AsTime(); t.After(now) {
			if t.Sub(now) > MaxScheduleAhead {
				return nil, status.Errorf(codes.InvalidArgument, "schedule_time %s is more than %v in the future", t.Format(time.RFC3339), MaxScheduleAhead)
			}
			when = t
		}
	}
	name := in.GetName()
	if name == "" {
		for name == "" || q.tasks[shortName(name)] != nil {
			name = queueName + "/tasks/" + newTaskID()
		}
	} else {
		if _, ok := q.tasks[shortName(name)]; ok || s.reservedLocked(name, now) {
			return nil, status.Error(codes.AlreadyExists, msgTaskExists)
		}
	}
	own := proto.Clone(in).(*cloudtaskspb.Task)
	pb := &cloudtaskspb.Task{
		Name:             name,
		MessageType:      own.MessageType,
		ScheduleTime:     timestamppb.New(when.Truncate(time.Microsecond)),
		CreateTime:       timestamppb.New(now.Truncate(time.Second)),
		DispatchDeadline: durationpb.New(deadline),
		RetryConfig:      own.RetryConfig,
		View:             cloudtaskspb.Task_FULL,
	}
	hr := pb.GetHttpRequest()
	if hr.HttpMethod == cloudtaskspb.HttpMethod_HTTP_METHOD_UNSPECIFIED {
		hr.HttpMethod = cloudtaskspb.HttpMethod_POST
	}
	if oa := hr.GetOauthToken(); oa != nil && oa.Scope == "" {
		oa.Scope = "https://www.googleapis.com/auth/cloud-platform"
	}
	s.seq++
	t := &task{pb: pb, seq: s.seq, index: -1, created: now}
	if err := s.persistLocked(taskRecord(t)); err != nil {
		return nil, err
	}
	q.tasks[shortName(name)] = t
	heap.Push(&q.pending, t)
	s.poke()
	return view(pb, req.GetResponseView()), nil
}

func (s *Server) taskLocked(name string) (*queue, *task, error) {
	qn, id, err := parseTaskName(name)
	if err != nil {
		return nil, nil, err
	}
	q, ok := s.queues[qn]
	if !ok {
		return nil, nil, status.Error(codes.NotFound, msgNotFound)
	}
	t, ok := q.tasks[id]
	if !ok {
		return nil, nil, status.Error(codes.NotFound, msgNotFound)
	}
	return q, t, nil
}

func (s *Server) GetTask(ctx context.Context, req *cloudtaskspb.GetTaskRequest) (*cloudtaskspb.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, t, err := s.taskLocked(req.GetName())
	if status.Code(err) == codes.NotFound && s.reservedLocked(req.GetName(), s.clock.Now()) {
		return nil, status.Error(codes.NotFound, msgTaskGone)
	}
	if err != nil {
		return nil, err
	}
	return view(t.pb, req.GetResponseView()), nil
}

// reservedLocked reports whether a task of this name completed or was
// deleted within the name reservation, forgetting an expired reservation.
func (s *Server) reservedLocked(name string, now time.Time) bool {
	until, ok := s.reserved[name]
	if ok && !now.Before(until) {
		delete(s.reserved, name)
		return false
	}
	return ok
}

func (s *Server) ListTasks(ctx context.Context, req *cloudtaskspb.ListTasksRequest) (*cloudtaskspb.ListTasksResponse, error) {
	size, after, err := pageArgs(req.GetPageSize(), req.GetPageToken(), maxTaskPageSize)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(req.GetParent())
	if err != nil {
		return nil, err
	}
	ids, next := page(q.tasks, after, size, func(string, *task) bool { return true })
	resp := &cloudtaskspb.ListTasksResponse{NextPageToken: next}
	for _, id := range ids {
		resp.Tasks = append(resp.Tasks, view(q.tasks[id].pb, req.GetResponseView()))
	}
	return resp, nil
}

func (s *Server) DeleteTask(ctx context.Context, req *cloudtaskspb.DeleteTaskRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, t, err := s.taskLocked(req.GetName())
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	if err := s.persistLocked(record{Op: opDelTask, Name: t.pb.Name, Until: now.Add(s.reservation)}); err != nil {
		return nil, err
	}
	s.removeTaskLocked(q, t, now)
	return &emptypb.Empty{}, nil
}

// RunTask dispatches the task now, ignoring the queue's rate limits and
// PAUSED state, and returns it as recorded at dispatch (before any response).
// A task whose attempt is already in flight is returned without a second
// dispatch.
func (s *Server) RunTask(ctx context.Context, req *cloudtaskspb.RunTaskRequest) (*cloudtaskspb.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, t, err := s.taskLocked(req.GetName())
	if err != nil {
		return nil, err
	}
	if !t.running {
		if s.stopping {
			return nil, status.Error(codes.Unavailable, "the emulator is shutting down")
		}
		heap.Remove(&q.pending, t.index)
		job := s.startAttemptLocked(q, t, s.clock.Now(), true)
		s.forced = append(s.forced, job)
		s.poke()
	}
	return view(t.pb, req.GetResponseView()), nil
}

// removeTaskLocked forgets t and reserves its name. An attempt in flight
// finishes unrecorded.
func (s *Server) removeTaskLocked(q *queue, t *task, now time.Time) {
	delete(q.tasks, shortName(t.pb.Name))
	if t.index >= 0 {
		heap.Remove(&q.pending, t.index)
	}
	s.reserved[t.pb.Name] = now.Add(s.reservation)
}

// ---- helpers ----

func view(pb *cloudtaskspb.Task, v cloudtaskspb.Task_View) *cloudtaskspb.Task {
	out := proto.Clone(pb).(*cloudtaskspb.Task)
	if v == cloudtaskspb.Task_FULL {
		out.View = cloudtaskspb.Task_FULL
		return out
	}
	out.View = cloudtaskspb.Task_BASIC
	if hr := out.GetHttpRequest(); hr != nil {
		hr.Body = nil
	}
	return out
}

func parentOf(name, sep string) string {
	if i := strings.LastIndex(name, sep); i >= 0 {
		return name[:i]
	}
	return ""
}

func pageArgs(size int32, token string, maxSize int) (int, string, error) {
	if size < 0 {
		return 0, "", status.Errorf(codes.InvalidArgument, "page_size must not be negative, got %d", size)
	}
	n := int(size)
	if n == 0 || n > maxSize {
		n = maxSize
	}
	if token == "" {
		return n, "", nil
	}
	after, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(after) == 0 {
		return 0, "", status.Errorf(codes.InvalidArgument, "invalid page_token %q", token)
	}
	return n, string(after), nil
}

func pageToken(last string) string { return base64.RawURLEncoding.EncodeToString([]byte(last)) }

// page is the one keyset paging of both listings: the keys of m after the
// page token's key that keep accepts, in order, at most size of them, and
// the token of the next page ("" on the last).
func page[V any](m map[string]V, after string, size int, keep func(key string, v V) bool) ([]string, string) {
	var keys []string
	for k, v := range m {
		if k > after && keep(k, v) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) > size {
		return keys[:size], pageToken(keys[size-1])
	}
	return keys, ""
}
