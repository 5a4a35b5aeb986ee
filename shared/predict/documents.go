package predict

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
)

// The Firestore documents of the predictions (docs/contracts.md). agentkit
// writes the counts and reads the model; the learner (shared/predict/learner
// through shared/store) reads the counts and the failure log and writes the
// statistics, its state and the model.
const (
	// ModelCollection holds ModelDoc (the Model) and LearnerDoc (the
	// learner's cursors).
	ModelCollection = "dlq-predictions"
	ModelDoc        = "current"
	LearnerDoc      = "learner"
	// CountsCollection holds one Counts document per agent and hour.
	CountsCollection = "dlq-predict-counts"
	// StatsCollection holds one DayStats document per UTC day.
	StatsCollection = "dlq-predict-stats"
)

// Counts is a CountsCollection document: the tasks agentkit's Publish
// counted for one agent in one UTC hour, per cell (Key.String() → tasks),
// added to with blind increments.
type Counts struct {
	Agent string           `firestore:"agent"`
	Hour  time.Time        `firestore:"hour"`
	Cells map[string]int64 `firestore:"cells"`
	// ExpireAt lets Firestore's TTL delete the document once the learner
	// has long folded it.
	ExpireAt time.Time `firestore:"expire_at"`
}

// CountsDocID is the id of the Counts document of agent in hour:
// "<yyyymmddhh>-<agent>", the agent path-escaped (a '/' is not allowed in
// an id), or its sha256 when that is too long for an id.
func CountsDocID(agent string, hour time.Time) string {
	a := url.PathEscape(agent)
	if len(a) > 1000 {
		sum := sha256.Sum256([]byte(agent))
		a = "sha256-" + hex.EncodeToString(sum[:])
	}
	return hour.UTC().Format("2006010215") + "-" + a
}

// CountsRetention is how long a Counts document is kept after its hour.
const CountsRetention = 3 * 24 * time.Hour

// DefaultWindow is how many days of statistics a model is learnt from:
// older behaviour ages out.
const DefaultWindow = 14 * 24 * time.Hour

// Day is the UTC day of t.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// FeaturesOf reads the features of a task from what its message holds: the
// agent and type by the conventions, the payload size, the publisher's
// token estimate (event.HeaderEstimatedTokens), the pending count agentkit
// stamped (event.HeaderPending) and the hour of publishedAt. agentkit's
// Publish and the learner (from a dead task's entry) both call it, so a
// task is counted and its death is learnt in the same cells.
func FeaturesOf(c event.Conventions, subject string, h map[string][]string, payloadBytes int, publishedAt time.Time) Features {
	f := Features{Agent: c.Agent(subject, h), TaskType: c.TaskType(subject, h), PayloadBytes: payloadBytes,
		Hour: publishedAt.UTC().Hour()}
	if n, ok := ParseCount(event.Header(h, event.HeaderEstimatedTokens)); ok && n < 1<<31 {
		f.EstTokens = int(n)
	}
	f.Pending, f.PendingKnown = ParseCount(event.Header(h, event.HeaderPending))
	return f
}
