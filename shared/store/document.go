package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
)

// What every aggregate does with its documents, written once: read one by id
// (outside or inside a transaction, a missing one being ErrNotFound that
// names it), list or page through a query, decode a document with its id
// kept outside the document.

// fetch reads the document at ref, counting the read; snap is nil when
// there is none.
func fetch(ctx context.Context, s *Store, ref *firestore.DocumentRef) (*firestore.DocumentSnapshot, error) {
	snap, err := ref.Get(ctx)
	s.read(1)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("firestore get %s/%s: %w", ref.Parent.ID, ref.ID, err)
	}
	return snap, nil
}

// txFetch is fetch inside a transaction; other errors are left to the
// transaction's caller (txError), which knows the operation.
func txFetch(s *Store, tx *firestore.Transaction, ref *firestore.DocumentRef) (*firestore.DocumentSnapshot, error) {
	snap, err := tx.Get(ref)
	s.read(1)
	if isNotFound(err) {
		return nil, nil
	}
	return snap, err
}

// getDoc reads the document at ref and decodes it; what names the aggregate
// in the error ("entry", "bulk run").
func getDoc[T any](ctx context.Context, s *Store, ref *firestore.DocumentRef, what string, decode func(*firestore.DocumentSnapshot) (*T, error)) (*T, error) {
	snap, err := fetch(ctx, s, ref)
	return decodeFound(snap, err, ref, what, decode)
}

// txGet is getDoc inside a transaction.
func txGet[T any](s *Store, tx *firestore.Transaction, ref *firestore.DocumentRef, what string, decode func(*firestore.DocumentSnapshot) (*T, error)) (*T, error) {
	snap, err := txFetch(s, tx, ref)
	return decodeFound(snap, err, ref, what, decode)
}

// decodeFound decodes what a fetch of ref returned, a missing document
// being ErrNotFound that names it.
func decodeFound[T any](snap *firestore.DocumentSnapshot, err error, ref *firestore.DocumentRef, what string, decode func(*firestore.DocumentSnapshot) (*T, error)) (*T, error) {
	if err != nil {
		return nil, err
	}
	if snap == nil {
		return nil, fmt.Errorf("%w: %s %q", ErrNotFound, what, ref.ID)
	}
	return decode(snap)
}

// readOptional reads the document at ref into v; found is false, and v
// untouched, when there is none: the singletons that start out missing
// (reconcile's state, the alert state).
func readOptional(ctx context.Context, s *Store, ref *firestore.DocumentRef, v any) (found bool, err error) {
	snap, err := fetch(ctx, s, ref)
	return decodeOptional(snap, err, v)
}

// txReadOptional is readOptional inside a transaction.
func txReadOptional(s *Store, tx *firestore.Transaction, ref *firestore.DocumentRef, v any) (found bool, err error) {
	snap, err := txFetch(s, tx, ref)
	return decodeOptional(snap, err, v)
}

func decodeOptional(snap *firestore.DocumentSnapshot, err error, v any) (found bool, _ error) {
	if err != nil || snap == nil {
		return false, err
	}
	if err := decodeInto(snap, v); err != nil {
		return false, err
	}
	return true, nil
}

// claimDoc is updateDoc for a claim: it returns the document only when f
// changed it, nil when f left it (another owner holds it, it moved on).
func claimDoc[T any](ctx context.Context, s *Store, ref *firestore.DocumentRef, what, op string,
	decode func(*firestore.DocumentSnapshot) (*T, error), f func(v *T, now time.Time) (changed bool, err error)) (*T, error) {
	changed := false
	v, err := updateDoc(ctx, s, ref, what, op, decode, func(v *T, now time.Time) (bool, error) {
		var err error
		changed, err = f(v, now)
		return changed, err
	})
	if err != nil || !changed {
		return nil, err
	}
	return v, nil
}

// queryDocs runs q and decodes every document it returns; what names the
// query in errors ("bulk-runs", "webhooks of tenant \"t\"").
func queryDocs[T any](ctx context.Context, s *Store, q firestore.Query, what string, decode func(*firestore.DocumentSnapshot) (*T, error)) ([]*T, error) {
	snaps, err := queryAll(ctx, s, q, what)
	if err != nil {
		return nil, err
	}
	return decodeAll(snaps, decode)
}

// pageDocs reads one page of at most limit documents of q; more reports
// whether another page follows. It asks for one document more than the page,
// which only answers that question and is not decoded.
func pageDocs[T any](ctx context.Context, s *Store, q firestore.Query, limit int, what string, decode func(*firestore.DocumentSnapshot) (*T, error)) (docs []*T, more bool, err error) {
	snaps, err := queryAll(ctx, s, q.Limit(limit+1), what)
	if err != nil {
		return nil, false, err
	}
	if len(snaps) > limit {
		snaps, more = snaps[:limit], true
	}
	docs, err = decodeAll(snaps, decode)
	return docs, more, err
}

// queryAll runs q, counting its reads (a query that finds nothing is billed
// as one read).
func queryAll(ctx context.Context, s *Store, q firestore.Query, what string) ([]*firestore.DocumentSnapshot, error) {
	snaps, err := readAll(s, q.Documents(ctx))
	if err != nil {
		return nil, fmt.Errorf("firestore query %s: %w", what, err)
	}
	return snaps, nil
}

// readAll reads every document of it, counting the reads (a query that
// finds nothing is billed as one read); inside a transaction too, where
// the transaction's caller wraps the error (txError).
func readAll(s *Store, it *firestore.DocumentIterator) ([]*firestore.DocumentSnapshot, error) {
	snaps, err := it.GetAll()
	s.read(max(1, len(snaps)))
	return snaps, err
}

func decodeAll[T any](snaps []*firestore.DocumentSnapshot, decode func(*firestore.DocumentSnapshot) (*T, error)) ([]*T, error) {
	out := make([]*T, 0, len(snaps))
	for _, snap := range snaps {
		v, err := decode(snap)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// tenantDocs lists tenant's documents of collection coll (its keys, its
// webhooks) oldest first, the id breaking ties; key gives a document's
// creation time and id. A tenant has few of them: they are read with one
// equality filter, which needs no composite index, and ordered here.
func tenantDocs[T any](ctx context.Context, s *Store, coll, tenant string, decode func(*firestore.DocumentSnapshot) (*T, error), key func(*T) (created time.Time, id string)) ([]*T, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	docs, err := queryDocs(ctx, s, s.fs.Collection(coll).Where("tenant", "==", tenant), fmt.Sprintf("%s of tenant %q", coll, tenant), decode)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(docs, func(a, b *T) int {
		at, aid := key(a)
		bt, bid := key(b)
		if c := at.Compare(bt); c != 0 {
			return c
		}
		return strings.Compare(aid, bid)
	})
	return docs, nil
}

// tenantDocTx runs f in a transaction on document id of collection coll (one
// of tenantDocs' kinds) at the transaction's time, and returns the document
// as f saw it; what names the kind in errors, tenantOf gives a document's
// tenant. The document must belong to tenant (AllTenants: to anyone): one of
// another tenant is ErrNotFound, like an id that does not exist or that
// newKeyID does not make (such an id never reaches Firestore as a path).
func tenantDocTx[T any](ctx context.Context, s *Store, coll, what, tenant, id string, decode func(*firestore.DocumentSnapshot) (*T, error),
	tenantOf func(*T) string, f func(tx *firestore.Transaction, ref *firestore.DocumentRef, v *T, now time.Time) error) (*T, error) {
	if tenant != AllTenants {
		if err := checkTenant(tenant); err != nil {
			return nil, err
		}
	}
	if !validKeyID(id) {
		return nil, fmt.Errorf("%w: %s %q", ErrNotFound, what, id)
	}
	var out *T
	ref := s.fs.Collection(coll).Doc(id)
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		v, err := txGet(s, tx, ref, what, decode)
		if err != nil {
			return err
		}
		if tenant != AllTenants && tenantOf(v) != tenant {
			return fmt.Errorf("%w: %s %s", ErrNotFound, what, id)
		}
		out = v
		return f(tx, ref, v, s.Now())
	})
	if err != nil {
		return nil, txError(what+" "+id, err)
	}
	return out, nil
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
	if err := decodeInto(snap, v); err != nil {
		return nil, err
	}
	return v, nil
}

func decodeInto(snap *firestore.DocumentSnapshot, v any) error {
	if err := snap.DataTo(v); err != nil {
		return fmt.Errorf("decode %s/%s: %w", snap.Ref.Parent.ID, snap.Ref.ID, err)
	}
	return nil
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
