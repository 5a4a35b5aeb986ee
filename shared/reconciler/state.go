package reconciler

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
)

// State is dlq-audits/_state: where each resumable section stopped. Only a
// run holding the lease writes it; a dry run reads it and leaves it.
type State struct {
	RunID     string    `firestore:"run_id"`
	UpdatedAt time.Time `firestore:"updated_at"`
	// Resume is the section the next run starts with (the one this run
	// stopped in); empty: start at the beginning of the ring.
	Resume string `firestore:"resume"`
	// Capture is the last checked sequence per capture stream.
	Capture map[string]int64 `firestore:"capture"`
	// Unconsumed is, per work stream, the last sequence recorded on each
	// subject no consumer's filter matches (subjects that became matched
	// or empty are dropped).
	Unconsumed map[string][]SubjectCursor `firestore:"unconsumed"`
	Tasks      store.Cursor               `firestore:"tasks"`
	Replaying  store.Cursor               `firestore:"replaying"`
	Replayed   store.Cursor               `firestore:"replayed"`
	Held       store.Cursor               `firestore:"held"`
	// LastPass summarises the last complete tenant-health pass (the
	// entries section, over the tenant-hour counters).
	LastPass *PassSummary `firestore:"last_pass"`
	// DaysFolded is the last closed day whose rollup shards a run folded
	// into one (store.CompactDay; DayLayout), so each day is folded once.
	DaysFolded string `firestore:"days_folded"`
}

// SubjectCursor is where the consumer-filter audit stopped on a subject
// (Seq, the last message handled) and the subject's oldest message, so a
// run reads only what is new. Cursors are per subject, not per stream: a
// subject whose consumer was deleted becomes unmatched with messages older
// than any stream cursor.
type SubjectCursor struct {
	Subject string    `firestore:"subject"`
	Seq     int64     `firestore:"seq"`
	First   int64     `firestore:"first"`
	FirstAt time.Time `firestore:"first_at"`
}

// PassSummary is what the traffic table keeps of the last complete pass.
type PassSummary struct {
	From time.Time `firestore:"from"`
	To   time.Time `firestore:"to"`
	// Scanned is the entries the counters covered.
	Scanned    int64 `firestore:"scanned"`
	Duplicates int64 `firestore:"duplicates"`
}

// cursor is a section's cursor, readable, for the report.
func (s *State) cursor(section string) string {
	pc := func(c store.Cursor) string {
		if c.IsZero() {
			return ""
		}
		return fmt.Sprintf("%s %s", c.At.UTC().Format(time.RFC3339Nano), c.ID)
	}
	switch section {
	case SectionCapture:
		out := ""
		for _, k := range slices.Sorted(maps.Keys(s.Capture)) {
			if out != "" {
				out += ", "
			}
			out += k + " after seq " + strconv.FormatInt(s.Capture[k], 10)
		}
		return out
	case SectionConsumers:
		out := ""
		for _, k := range slices.Sorted(maps.Keys(s.Unconsumed)) {
			for _, c := range s.Unconsumed[k] {
				if out != "" {
					out += ", "
				}
				out += k + " " + c.Subject + " after seq " + strconv.FormatInt(c.Seq, 10)
			}
		}
		return out
	case SectionTasks:
		return pc(s.Tasks)
	case SectionReplaying:
		return pc(s.Replaying)
	case SectionReplayed:
		return pc(s.Replayed)
	case SectionHeld:
		return pc(s.Held)
	}
	return ""
}

func (s *State) cursors() map[string]string {
	out := map[string]string{}
	for _, name := range ring {
		if c := s.cursor(name); c != "" {
			out[name] = c
		}
	}
	return out
}
