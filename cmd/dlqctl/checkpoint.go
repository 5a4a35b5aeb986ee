package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/store"
)

// checkpoint is a redrive's progress on disk. Its size does not grow with
// the work done: the query is ordered (newest first, then id), so the
// keyset cursor of the last entry passed says that everything up to it is
// done, and the counters say how it went. A resumed run continues after
// the cursor.
//
// Pending is written ahead of each action (the entry, its position and its
// updated_at as listed) and cleared by the next save, so the one entry a
// crash can leave undecided is known: on resume it is acted on only if it is
// still unchanged (shared/redrive settles it).
type checkpoint struct {
	Schema string `json:"schema"`
	Filter filter `json:"filter"`
	// Include are the opt-ins (redrive.OptInApproverRules; a checkpoint of
	// an earlier dlqctl names the categories it opted into).
	Include []string `json:"include,omitempty"`
	Rate    float64  `json:"rate_per_second"`
	Scope   string   `json:"scope,omitempty"`
	// By acts, as an approver (dlqctl's role).
	By    string `json:"by"`
	Total int64  `json:"total"`
	// The cursor, the write-ahead and the counters, as the console's bulk
	// runs keep them too.
	store.RedriveProgress
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Complete  bool      `json:"complete"`
}

// actor is who the redrive acts as: By, in dlqctl's role.
func (cp *checkpoint) actor() authority.Actor {
	return authority.Actor{Name: cp.By, Role: authority.Approver}
}

// pending is the entry a redrive is about to act on.
type pending = store.RedrivePending

// checkpointSchema names the format; v1 kept the whole done-list.
const checkpointSchema = "jsdlq.redrive.v2"

// checkpointFile writes a checkpoint atomically (a temporary file renamed
// over the old one, so a kill mid-write leaves the previous checkpoint) and
// counts the bytes it wrote.
type checkpointFile struct {
	path string
	// write stores the encoded checkpoint; nil: writeAtomic. (A test
	// counts bytes over 50 000 saves without the disk.)
	write   func(path string, b []byte) error
	written int64 // bytes written by save, in all
	last    int   // bytes of the latest save
}

func (w *checkpointFile) save(cp *checkpoint) error {
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	b = append(b, '\n')
	write := w.write
	if write == nil {
		write = writeAtomic
	}
	if err := write(w.path, b); err != nil {
		return err
	}
	w.written += int64(len(b))
	w.last = len(b)
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	return nil
}

func loadCheckpoint(path string) (*checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	var probe struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(b, &probe); err != nil || (probe.Schema != checkpointSchema && probe.Schema != "jsdlq.redrive.v1") {
		return nil, usagef("%s is not a dlqctl redrive checkpoint", path)
	}
	if probe.Schema != checkpointSchema {
		return nil, usagef("%s was written by an older dlqctl (%s) and cannot be resumed; start a new redrive with --filter (check its plan with --dry-run first)", path, probe.Schema)
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, usagef("%s is not a dlqctl redrive checkpoint: %v", path, err)
	}
	// Releasing held entries is a breaker close's own run (the console's),
	// never a redrive's: a checkpoint asking for it was not written here.
	if slices.Contains(cp.Include, redrive.OptInReleaseHeld) {
		return nil, usagef("%s asks for %s, which no dlqctl redrive does", path, redrive.OptInReleaseHeld)
	}
	return &cp, nil
}
