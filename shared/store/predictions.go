package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/predict"
)

// This file holds the predictions' documents (docs/predictions.md): the
// task counts agentkit's Publish adds per agent and hour, the daily
// statistics the learner folds counts and deaths into, the learner's
// cursors and the model. The document layouts are shared/predict's
// (agentkit writes the counts and reads the model with them).

// statsDoc is a predict.StatsCollection document: one UTC day's cells.
type statsDoc struct {
	Day      time.Time               `firestore:"day"`
	Cells    map[string]predict.Cell `firestore:"cells"`
	ExpireAt time.Time               `firestore:"expire_at"`
}

// LearnerState is where the learner stands: the counts of every hour
// before CountsThrough and the deaths of the entries up to DeathsAfter
// (created_at, id) are in the statistics. Entries before DeathsThrough are
// read one by one (Deaths), the hours from it on by their death cells
// (HourDeaths); once the entries are read DeathsAfter stays at
// DeathsThrough (DeathsFrom), never zero: a learner from before
// DeathsThrough, still deployed or rolled back to, reads the entries on
// from there, where a zero cursor would make it read them all again.
type LearnerState struct {
	CountsThrough time.Time `firestore:"counts_through"`
	DeathsThrough time.Time `firestore:"deaths_through,omitempty"`
	DeathsAfter   Cursor    `firestore:"deaths_after"`
	UpdatedAt     time.Time `firestore:"updated_at"`
}

func (a LearnerState) same(b LearnerState) bool {
	return a.CountsThrough.Equal(b.CountsThrough) && a.DeathsThrough.Equal(b.DeathsThrough) &&
		a.DeathsAfter.At.Equal(b.DeathsAfter.At) && a.DeathsAfter.ID == b.DeathsAfter.ID
}

func (s *Store) learnerRef() *firestore.DocumentRef {
	return s.fs.Collection(predict.ModelCollection).Doc(predict.LearnerDoc)
}

func (s *Store) modelRef() *firestore.DocumentRef {
	return s.fs.Collection(predict.ModelCollection).Doc(predict.ModelDoc)
}

// Learner returns the learner's state; the zero state before its first run.
func (s *Store) Learner(ctx context.Context) (LearnerState, error) {
	st, err := getDoc(ctx, s, s.learnerRef(), "learner state", decodeValue[LearnerState])
	if errors.Is(err, ErrNotFound) {
		return LearnerState{}, nil
	}
	if err != nil {
		return LearnerState{}, err
	}
	return *st, nil
}

// TaskCounts returns the counts of the hours in [from, to), oldest first.
func (s *Store) TaskCounts(ctx context.Context, from, to time.Time) ([]predict.Counts, error) {
	q := s.fs.Collection(predict.CountsCollection).Where("hour", ">=", from.UTC()).Where("hour", "<", to.UTC()).OrderBy("hour", firestore.Asc)
	snaps, err := queryAll(ctx, s, q, fmt.Sprintf("%s from %s to %s", predict.CountsCollection, from.UTC(), to.UTC()))
	if err != nil {
		return nil, err
	}
	out := make([]predict.Counts, len(snaps))
	for i, snap := range snaps {
		if err := decodeInto(snap, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Death is the death of a counted task, as the learner learns it.
type Death struct {
	EntryID  string
	Day      time.Time // of the task's publish
	Features predict.Features
	Reason   string
}

// deathFields are what PredictFeatures reads of an entry: never the payload.
var deathFields = []string{"agent", "task_type", "subject", "headers", "payload_size", "published_at",
	"reason_code", "replay_of", "created_at"}

// DeathPage is a page of Deaths.
type DeathPage struct {
	Deaths []Death
	// Read is how many entries the page read, Next the cursor after the
	// last of them (the cursor asked for when none was read).
	Read int
	Next Cursor
}

// Deaths reads up to limit entries created after the cursor and before to,
// oldest first, and returns the deaths of counted tasks among them (entries
// that are not — replays, tasks published without agentkit's Publish,
// tasks a prediction treated or sent to the DLQ — are skipped). to keeps
// the newest entries out until their creation has certainly committed.
func (s *Store) Deaths(ctx context.Context, after Cursor, to time.Time, limit int) (DeathPage, error) {
	if limit < 1 {
		return DeathPage{Next: after}, fmt.Errorf("%w: limit %d, want at least 1", ErrBadQuery, limit)
	}
	q := s.fs.Collection(FailureLog).Where("created_at", "<", to.UTC())
	if !after.IsZero() {
		q = q.Where("created_at", ">=", after.At)
	}
	q = q.OrderBy("created_at", firestore.Asc).OrderBy(firestore.DocumentID, firestore.Asc)
	if !after.IsZero() {
		q = q.StartAfter(after.At, after.ID)
	}
	snaps, err := queryAll(ctx, s, q.Select(deathFields...).Limit(limit), fmt.Sprintf("%s for deaths after %v", FailureLog, after))
	if err != nil {
		return DeathPage{Next: after}, err
	}
	p := DeathPage{Next: after, Read: len(snaps)}
	for _, snap := range snaps {
		e, err := decodeEntry(snap)
		if err != nil {
			return DeathPage{Next: after}, err
		}
		p.Next = Cursor{At: e.CreatedAt, ID: e.ID}
		if f, ok := e.PredictFeatures(); ok {
			p.Deaths = append(p.Deaths, Death{EntryID: e.ID, Day: predict.Day(e.publishedAt()), Features: f, Reason: e.ReasonCode})
		}
	}
	return p, nil
}

// deathsOf is the entry's death as the hour's death cells count it
// (Metrics.Deaths): one in each cell of its task's features on the day of
// its publish, under its reason; none when the task was not counted.
func deathsOf(e *Entry) map[string]map[string]int64 {
	f, ok := e.PredictFeatures()
	if !ok {
		return nil
	}
	day := predict.Day(e.publishedAt()).Format(time.DateOnly)
	out := map[string]map[string]int64{}
	for _, k := range f.Keys() {
		out[day+"/"+k.String()] = map[string]int64{metricKey(e.ReasonCode): 1}
	}
	return out
}

// DeathsFrom is the cursor of Deaths that starts at the first entry
// created at or after at: its id, "!", sorts before every id EntryID
// makes (their bytes are '%' and above). It is never zero, which Deaths
// reads as the first entry of all.
func DeathsFrom(at time.Time) Cursor {
	return Cursor{At: at.UTC(), ID: "!"}
}

// HourDeaths are the deaths Record counted among the entries created in
// hour (Metrics.Deaths), as statistics by day of publish: what Deaths
// finds in the hour's entries, from the hour's metrics (one document once
// reconcile compacted the hour, at most one per shard before). malformed
// counts the cells that are not a day and a key.
func (s *Store) HourDeaths(ctx context.Context, hour time.Time) (days map[time.Time]predict.Stats, malformed int64, err error) {
	m, err := s.ReadMetrics(ctx, Hour(hour))
	if err != nil {
		return nil, 0, err
	}
	days = map[time.Time]predict.Stats{}
	for cell, reasons := range m.Deaths {
		d, ks, _ := strings.Cut(cell, "/")
		day, derr := time.Parse(time.DateOnly, d)
		k, kerr := predict.ParseKey(ks)
		if derr != nil || kerr != nil {
			malformed++
			continue
		}
		c := predict.Cell{Reasons: map[string]int64{}}
		for reason, n := range reasons {
			if n <= 0 {
				continue
			}
			if reason == NoKey {
				reason = ""
			}
			c.Deaths += n
			c.Reasons[reason] += n
		}
		if c.Deaths == 0 {
			continue
		}
		if days[day] == nil {
			days[day] = predict.Stats{}
		}
		days[day].Add(k, c)
	}
	return days, malformed, nil
}

func (e *Entry) publishedAt() time.Time {
	if e.PublishedAt.IsZero() {
		return e.CreatedAt
	}
	return e.PublishedAt
}

// PredictFeatures are the features of the entry's task as Publish counted
// them (predict.FeaturesOf over the original message); ok is false when the
// task was not counted: a replay, a task published without agentkit's
// Publish or treated by a prediction (no event.HeaderCounted).
func (e *Entry) PredictFeatures() (predict.Features, bool) {
	if e.ReplayOf != "" || e.ReasonCode == predict.ReasonPredictedFailure {
		return predict.Features{}, false
	}
	h, err := event.DecodeHeaders(e.Headers)
	if err != nil || event.Header(h, event.HeaderCounted) == "" {
		return predict.Features{}, false
	}
	f := predict.FeaturesOf(event.DefaultConventions, e.Subject, h, int(min(e.PayloadSize, 1<<31-1)), e.publishedAt())
	if f.Agent == "" {
		f.Agent = e.Agent
	}
	return f, f.Agent != ""
}

// MaxDayCells bounds the cells of a day's statistics so that its document
// stays well under Firestore's 1 MiB (about 100 bytes a cell).
const MaxDayCells = 8000

// pruneCells keeps the MaxDayCells cells with the most tasks (ties: by
// key) and reports how many it dropped: the fewest-task cells are the
// furthest from any minimum support.
func pruneCells(st predict.Stats) int {
	if len(st) <= MaxDayCells {
		return 0
	}
	keys := slices.SortedFunc(maps.Keys(st), func(a, b predict.Key) int {
		if c := st[b].Tasks - st[a].Tasks; c != 0 {
			if c > 0 {
				return 1
			}
			return -1
		}
		return strings.Compare(a.String(), b.String())
	})
	for _, k := range keys[MaxDayCells:] {
		delete(st, k)
	}
	return len(keys) - MaxDayCells
}

// FoldPredictionStats adds days' statistics to the daily documents and
// moves the learner from from to to, in one transaction: a fold is counted
// once or not at all. ErrConflict when the learner is no longer at from
// (another run folded meanwhile; nothing is written). A day beyond
// MaxDayCells loses its cells with the fewest tasks; dropped says how many.
func (s *Store) FoldPredictionStats(ctx context.Context, from, to LearnerState, days map[time.Time]predict.Stats) (dropped int, err error) {
	keys := slices.SortedFunc(maps.Keys(days), func(a, b time.Time) int { return a.Compare(b) })
	refs := make([]*firestore.DocumentRef, len(keys))
	for i, d := range keys {
		refs[i] = s.fs.Collection(predict.StatsCollection).Doc(d.UTC().Format(time.DateOnly))
	}
	err = s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		dropped = 0
		var cur LearnerState
		switch st, err := txGet(s, tx, s.learnerRef(), "learner state", decodeValue[LearnerState]); {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return err
		default:
			cur = *st
		}
		if !cur.same(from) {
			return fmt.Errorf("%w: the learner moved on to %v", ErrConflict, cur.DeathsAfter)
		}
		snaps, err := tx.GetAll(refs)
		s.read(len(refs))
		if err != nil {
			return err
		}
		docs := make([]statsDoc, len(keys))
		for i, snap := range snaps {
			if snap.Exists() {
				if err := snap.DataTo(&docs[i]); err != nil {
					return fmt.Errorf("decode %s/%s: %w", predict.StatsCollection, snap.Ref.ID, err)
				}
			}
		}
		for i, d := range keys {
			st, err := statsOf(docs[i].Cells)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", predict.StatsCollection, refs[i].ID, err)
			}
			st.Merge(days[d])
			dropped += pruneCells(st)
			doc := statsDoc{Day: d.UTC(), Cells: cellsOf(st), ExpireAt: d.Add(predict.DefaultWindow + 7*24*time.Hour)}
			if err := tx.Set(refs[i], doc); err != nil {
				return err
			}
		}
		to.UpdatedAt = s.Now()
		return tx.Set(s.learnerRef(), to)
	})
	s.wrote(len(keys) + 1)
	if err != nil {
		return 0, txError("fold prediction statistics", err)
	}
	return dropped, nil
}

// PredictionStats sums the daily statistics of the days in [from, to].
func (s *Store) PredictionStats(ctx context.Context, from, to time.Time) (predict.Stats, error) {
	var refs []*firestore.DocumentRef
	for d := predict.Day(from); !d.After(to); d = d.AddDate(0, 0, 1) {
		refs = append(refs, s.fs.Collection(predict.StatsCollection).Doc(d.Format(time.DateOnly)))
	}
	snaps, err := s.fs.GetAll(ctx, refs)
	s.read(len(refs))
	if err != nil {
		return nil, fmt.Errorf("firestore get %s from %s to %s: %w", predict.StatsCollection, from.Format(time.DateOnly), to.Format(time.DateOnly), err)
	}
	sum := predict.Stats{}
	for _, snap := range snaps {
		if !snap.Exists() {
			continue
		}
		var doc statsDoc
		if err := snap.DataTo(&doc); err != nil {
			return nil, fmt.Errorf("decode %s/%s: %w", predict.StatsCollection, snap.Ref.ID, err)
		}
		st, err := statsOf(doc.Cells)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", predict.StatsCollection, snap.Ref.ID, err)
		}
		sum.Merge(st)
	}
	return sum, nil
}

func statsOf(cells map[string]predict.Cell) (predict.Stats, error) {
	st := make(predict.Stats, len(cells))
	for k, c := range cells {
		key, err := predict.ParseKey(k)
		if err != nil {
			return nil, err
		}
		st[key] = c
	}
	return st, nil
}

func cellsOf(st predict.Stats) map[string]predict.Cell {
	out := make(map[string]predict.Cell, len(st))
	for k, c := range st {
		out[k.String()] = c
	}
	return out
}

// PredictionModel reads the current model; ErrNotFound before the first.
func (s *Store) PredictionModel(ctx context.Context) (predict.Model, error) {
	m, err := getDoc(ctx, s, s.modelRef(), "prediction model", decodeValue[predict.Model])
	if err != nil {
		return predict.Model{}, err
	}
	return *m, nil
}

// SavePredictionModel replaces the model with m, versioned one above the
// model it replaces (m.Version is ignored), and returns it as saved.
func (s *Store) SavePredictionModel(ctx context.Context, m predict.Model) (predict.Model, error) {
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		switch cur, err := txGet(s, tx, s.modelRef(), "prediction model", decodeValue[predict.Model]); {
		case errors.Is(err, ErrNotFound):
			m.Version = 1
		case err != nil:
			return err
		default:
			m.Version = cur.Version + 1
		}
		return tx.Set(s.modelRef(), m)
	})
	s.wrote(1)
	if err != nil {
		return predict.Model{}, txError("save prediction model", err)
	}
	return m, nil
}
