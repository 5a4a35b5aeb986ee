package cloudtasks

import (
	"container/heap"
	"context"
	"encoding/base64"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The task RPCs of google.cloud.tasks.v2, and the paging they share with
// ListQueues.

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
