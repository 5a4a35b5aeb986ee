package cloudtasks

import (
	"context"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The queue RPCs of google.cloud.tasks.v2.

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
