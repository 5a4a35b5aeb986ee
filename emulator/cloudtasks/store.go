package cloudtasks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// The state log is one JSON record per line, appended and fsynced before a
// mutation is acknowledged, so an acknowledged CreateTask survives a crash.
// On open the log is replayed and rewritten compactly (temp file, fsync,
// rename, fsync of the directory), which also drops a torn last line left by
// a crash in the middle of an append.
const stateFile = "state.jsonl"

type recordOp string

const (
	opQueue    recordOp = "queue"     // Queue holds the whole queue
	opDelQueue recordOp = "del_queue" // Name, Until = tombstone expiry
	opTask     recordOp = "task"      // Task holds the whole task and its bookkeeping
	opDelTask  recordOp = "del_task"  // Name, Until = end of the name reservation
)

type record struct {
	Op     recordOp        `json:"op"`
	Name   string          `json:"name,omitempty"`
	Until  time.Time       `json:"until,omitzero"`
	Queue  json.RawMessage `json:"queue,omitempty"`
	Task   json.RawMessage `json:"task,omitempty"`
	Seq    uint64          `json:"seq,omitempty"`
	Prev   int             `json:"prev_status,omitempty"`
	Exec   int32           `json:"exec_count,omitempty"`
	Reason string          `json:"retry_reason,omitempty"`
	// Created keeps full precision (create_time is truncated to seconds on
	// the wire) so PurgeQueue can tell tasks created just before it.
	Created time.Time `json:"created,omitzero"`
}

type store struct {
	dir      string
	f        *os.File
	lock     *os.File
	appended int
}

// openStore reads the log in dir (creating dir if needed) and returns its
// records in order.
func openStore(dir string, log *slog.Logger) (*store, []record, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("cloudtasks: create data dir: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	st := &store{dir: dir, lock: lock}
	path := filepath.Join(dir, stateFile)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		st.close()
		return nil, nil, fmt.Errorf("cloudtasks: read state: %w", err)
	}
	var recs []record
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r record
		if err := json.Unmarshal(line, &r); err != nil {
			if i == len(lines)-1 {
				// Only the last line can be torn by a crash mid-append; that
				// mutation was never acknowledged.
				log.Warn("dropping torn last record of state log", "path", path, "error", err)
				break
			}
			st.close()
			return nil, nil, fmt.Errorf("cloudtasks: corrupt state log %s line %d: %w", path, i+1, err)
		}
		recs = append(recs, r)
	}
	return st, recs, nil
}

// rewrite replaces the log with recs atomically and reopens it for appends.
func (s *store) rewrite(recs []record) error {
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	path := filepath.Join(s.dir, stateFile)
	tmp, err := os.CreateTemp(s.dir, stateFile+".tmp*")
	if err != nil {
		return fmt.Errorf("cloudtasks: compact state: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	w := bufio.NewWriter(tmp)
	if err := writeRecords(w, recs); err != nil {
		tmp.Close()
		return fmt.Errorf("cloudtasks: compact state: %w", err)
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("cloudtasks: compact state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("cloudtasks: compact state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cloudtasks: compact state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cloudtasks: compact state: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("cloudtasks: compact state: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cloudtasks: open state: %w", err)
	}
	s.f = f
	s.appended = 0
	return nil
}

// append writes recs and fsyncs before returning.
func (s *store) append(recs ...record) error {
	var buf bytes.Buffer
	if err := writeRecords(&buf, recs); err != nil {
		return fmt.Errorf("cloudtasks: append state: %w", err)
	}
	if _, err := s.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("cloudtasks: append state: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("cloudtasks: sync state: %w", err)
	}
	s.appended += len(recs)
	return nil
}

// close closes the log and releases the directory lock.
func (s *store) close() error {
	var err error
	if s.f != nil {
		err = s.f.Close()
		s.f = nil
	}
	if s.lock != nil {
		_ = s.lock.Close() // closing the descriptor drops the flock
		s.lock = nil
	}
	return err
}

func writeRecords(w io.Writer, recs []record) error {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
