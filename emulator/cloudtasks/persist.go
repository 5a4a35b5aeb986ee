package cloudtasks

import (
	"container/heap"
	"fmt"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

func queueRecord(pb *cloudtaskspb.Queue) record {
	b, err := protojson.Marshal(pb)
	if err != nil {
		panic(fmt.Sprintf("cloudtasks: marshal queue: %v", err)) // a valid message always marshals
	}
	return record{Op: opQueue, Name: pb.Name, Queue: b}
}

func taskRecord(t *task) record {
	b, err := protojson.Marshal(t.pb)
	if err != nil {
		panic(fmt.Sprintf("cloudtasks: marshal task: %v", err))
	}
	return record{Op: opTask, Name: t.pb.Name, Task: b, Seq: t.seq, Prev: t.prevStatus, Reason: t.reason, Exec: t.execCount, Created: t.created}
}

// persistLocked makes recs durable before the caller changes memory, so an
// error leaves both unchanged.
func (s *Server) persistLocked(recs ...record) error {
	if s.store == nil {
		return nil
	}
	live := len(s.queues) + len(s.reserved)
	for _, q := range s.queues {
		live += len(q.tasks)
	}
	if s.store.appended > 10000 && s.store.appended > 4*live {
		if err := s.store.rewrite(s.snapshotLocked()); err != nil {
			s.log.Error("compact state", "error", err)
			return status.Errorf(codes.Internal, "compact state: %v", err)
		}
	}
	if err := s.store.append(recs...); err != nil {
		s.log.Error("persist state", "error", err)
		return status.Errorf(codes.Internal, "persist state: %v", err)
	}
	return nil
}

// snapshotLocked lists the records that rebuild the current state.
func (s *Server) snapshotLocked() []record {
	now := s.clock.Now()
	var recs []record
	for name, until := range s.deletedQueues {
		if now.Before(until) {
			recs = append(recs, record{Op: opDelQueue, Name: name, Until: until})
		}
	}
	for name, until := range s.reserved {
		if now.Before(until) {
			recs = append(recs, record{Op: opDelTask, Name: name, Until: until})
		} else {
			delete(s.reserved, name)
		}
	}
	for _, q := range s.queues {
		recs = append(recs, queueRecord(q.pb))
		for _, t := range q.tasks {
			recs = append(recs, taskRecord(t))
		}
	}
	return recs
}

// replay rebuilds memory from the log.
func (s *Server) replay(recs []record) error {
	for i, r := range recs {
		switch r.Op {
		case opQueue:
			pb := &cloudtaskspb.Queue{}
			if err := protojson.Unmarshal(r.Queue, pb); err != nil {
				return fmt.Errorf("cloudtasks: state record %d: %w", i+1, err)
			}
			if q, ok := s.queues[pb.Name]; ok {
				q.pb = pb
			} else {
				s.addQueueLocked(pb)
			}
		case opDelQueue:
			delete(s.queues, r.Name)
			if r.Until.After(s.clock.Now()) {
				s.deletedQueues[r.Name] = r.Until
			}
		case opTask:
			pb := &cloudtaskspb.Task{}
			if err := protojson.Unmarshal(r.Task, pb); err != nil {
				return fmt.Errorf("cloudtasks: state record %d: %w", i+1, err)
			}
			qn, id, err := parseTaskName(pb.Name)
			if err != nil {
				return fmt.Errorf("cloudtasks: state record %d: %w", i+1, err)
			}
			q, ok := s.queues[qn]
			if !ok {
				continue // the queue was deleted later in the log
			}
			if t, ok := q.tasks[id]; ok {
				heap.Remove(&q.pending, t.index)
			}
			t := &task{pb: pb, seq: r.Seq, index: -1, prevStatus: r.Prev, reason: r.Reason, execCount: r.Exec, created: r.Created}
			q.tasks[id] = t
			heap.Push(&q.pending, t)
			s.seq = max(s.seq, r.Seq)
		case opDelTask:
			qn, id, err := parseTaskName(r.Name)
			if err != nil {
				return fmt.Errorf("cloudtasks: state record %d: %w", i+1, err)
			}
			if q, ok := s.queues[qn]; ok {
				if t, ok := q.tasks[id]; ok {
					delete(q.tasks, id)
					heap.Remove(&q.pending, t.index)
				}
			}
			if r.Until.After(s.clock.Now()) {
				s.reserved[r.Name] = r.Until
			}
		default:
			return fmt.Errorf("cloudtasks: state record %d: unknown op %q", i+1, r.Op)
		}
	}
	return nil
}
