package store

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TransitionSeen is Transition for a caller that holds e as this store read
// or wrote it (Transition's result, a Get, a query's page): the move is
// written on condition that the entry's document is unchanged since, so it
// reads nothing (Firestore bills a write's update-time precondition as no
// read). An entry changed meanwhile, or one the store cannot vouch for, is
// moved by Transition, which reads it again and checks c.From on what it
// reads; so the outcome is Transition's in every case, one read cheaper
// when nobody else moved the entry.
//
// Only the fields the move changes are written, so e may be a scan's
// projection (ScanView: the status machine with its history) for a move
// that needs nothing else: no Apply and no notification (those read fields
// a projection lacks; they read again). Any other projection (ListView has
// no history, which the move would overwrite) is moved by Transition.
func (s *Store) TransitionSeen(ctx context.Context, e *Entry, c Change) (*Entry, error) {
	projection := e.view == ScanView
	switch {
	case e.seen.IsZero(), e.view != FullView && !projection, projection && (c.Apply != nil || Notifies(c.To)):
		return s.Transition(ctx, e.ID, c)
	}
	var cur Entry
	var refused error
	var commit firestore.CommitResponse
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		// Each attempt starts from e; Apply and the move must not edit
		// e's own history or headers.
		cur = *e
		cur.History = slices.Clone(e.History)
		cur.Headers = maps.Clone(e.Headers)
		if refused = s.move(tx, &cur, c, nil, !projection); refused != nil {
			return refused
		}
		s.wrote(1)
		return tx.Update(s.entryRef(e.ID), changedFields(e, &cur), firestore.LastUpdateTime(e.seen))
	}, firestore.WithCommitResponseTo(&commit))
	switch {
	case err == nil:
		cur.seen = commit.CommitTime()
		return &cur, nil
	case refused != nil, status.Code(err) == codes.FailedPrecondition, status.Code(err) == codes.NotFound:
		// Refused on what e says (a status, Apply), or e changed (or
		// gone) since it was read: decide on what is stored, which e may
		// no longer be.
		return s.Transition(ctx, e.ID, c)
	}
	return nil, txError("transition "+e.ID, err)
}

// DeferCheck puts off until at the next look a scan that reads only what
// is due (Query.DueBy) takes at e, as this store read it: a write of
// next_retry_at alone, on condition that the entry is unchanged since, so
// it reads nothing and cannot undo a move made meanwhile. It reports
// whether it wrote; an entry that changed (or is gone, or that the store
// cannot vouch for) is left as it is, and the next scan reads it as it is
// now. Repeating it writes the same value again.
func (s *Store) DeferCheck(ctx context.Context, e *Entry, at time.Time) (bool, error) {
	if e.seen.IsZero() {
		return false, nil
	}
	_, err := s.entryRef(e.ID).Update(ctx, []firestore.Update{{Path: "next_retry_at", Value: at.UTC()}}, firestore.LastUpdateTime(e.seen))
	s.wrote(1)
	switch status.Code(err) {
	case codes.OK:
		return true, nil
	case codes.FailedPrecondition, codes.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("firestore defer check of %s: %w", e.ID, err)
}

// storedField is a field of Entry's document.
type storedField struct {
	index     int
	name      string
	omitEmpty bool
}

// entryFields are Entry's stored fields.
var entryFields = func() []storedField {
	var out []storedField
	t := reflect.TypeFor[Entry]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("firestore"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		out = append(out, storedField{i, name, strings.Contains(opts, "omitempty")})
	}
	return out
}()

// changedFields are the updates that turn the stored before into after:
// each top-level field that differs, deleted where the document would omit
// it (as Set writes it).
func changedFields(before, after *Entry) []firestore.Update {
	bv, av := reflect.ValueOf(before).Elem(), reflect.ValueOf(after).Elem()
	var out []firestore.Update
	for _, f := range entryFields {
		b, a := bv.Field(f.index), av.Field(f.index)
		if reflect.DeepEqual(b.Interface(), a.Interface()) {
			continue
		}
		var v any = a.Interface()
		if f.omitEmpty && a.IsZero() {
			v = firestore.Delete
		}
		out = append(out, firestore.Update{Path: f.name, Value: v})
	}
	return out
}
