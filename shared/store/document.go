package store

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"
)

// What every aggregate does with its documents, written once: read one by id
// (outside or inside a transaction, a missing one being ErrNotFound that
// names it), decode it with its id kept outside the document.

// getDoc reads the document at ref and decodes it; what names the aggregate
// in the error ("entry", "bulk run").
func getDoc[T any](ctx context.Context, s *Store, ref *firestore.DocumentRef, what string, decode func(*firestore.DocumentSnapshot) (*T, error)) (*T, error) {
	snap, err := ref.Get(ctx)
	s.read(1)
	if isNotFound(err) {
		return nil, fmt.Errorf("%w: %s %q", ErrNotFound, what, ref.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("firestore get %s/%s: %w", ref.Parent.ID, ref.ID, err)
	}
	return decode(snap)
}

// txGet is getDoc inside a transaction; other errors are left to the
// transaction's caller (txError), which knows the operation.
func txGet[T any](s *Store, tx *firestore.Transaction, ref *firestore.DocumentRef, what string, decode func(*firestore.DocumentSnapshot) (*T, error)) (*T, error) {
	snap, err := tx.Get(ref)
	s.read(1)
	if isNotFound(err) {
		return nil, fmt.Errorf("%w: %s %q", ErrNotFound, what, ref.ID)
	}
	if err != nil {
		return nil, err
	}
	return decode(snap)
}

// decodeDoc reads snap into a new T and sets its id through id: aggregates
// keep their document id in a field the document does not store.
func decodeDoc[T any](snap *firestore.DocumentSnapshot, id func(*T) *string) (*T, error) {
	v, err := decodeValue[T](snap)
	if err != nil {
		return nil, err
	}
	*id(v) = snap.Ref.ID
	return v, nil
}

// decodeValue reads snap into a new T: a document that is a value of its
// own, with no id to keep (the learner's state, the prediction model).
func decodeValue[T any](snap *firestore.DocumentSnapshot) (*T, error) {
	v := new(T)
	if err := snap.DataTo(v); err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", snap.Ref.Parent.ID, snap.Ref.ID, err)
	}
	return v, nil
}

// updateDoc reads the document at ref in a transaction, lets f change it at
// the transaction's time and writes it back when f reports a change; op
// names the operation in errors (txError). It returns the document as f
// left it, changed or not; an error from f aborts the transaction.
func updateDoc[T any](ctx context.Context, s *Store, ref *firestore.DocumentRef, what, op string,
	decode func(*firestore.DocumentSnapshot) (*T, error), f func(v *T, now time.Time) (changed bool, err error)) (*T, error) {
	var out *T
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		out = nil
		v, err := txGet(s, tx, ref, what, decode)
		if err != nil {
			return err
		}
		changed, err := f(v, s.Now())
		if err != nil {
			return err
		}
		out = v
		if !changed {
			return nil
		}
		s.wrote(1)
		return tx.Set(ref, v)
	})
	if err != nil {
		return nil, txError(op, err)
	}
	return out, nil
}
