package replay

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
)

// What MarkRecovered answers decides whether Cloud Tasks is told to retry:
// only when a retry can help. An entry moved on or deleted before the move
// is a skip; an entry recovered whose later steps met a permanent problem
// is done (its chain's last checks take the rest); anything else, such as
// Firestore unavailable, is retried, and a retry repeats the steps
// without counting the entry twice.
func TestRecoveredRetriesOnlyWhatCanHelp(t *testing.T) {
	h := &Handler{log: obs.Discard()}
	e := &store.Entry{ID: "TASKS.1"}
	moved := &store.Entry{ID: "TASKS.1", Status: store.Recovered}
	unavailable := errors.New("firestore: unavailable")
	tests := []struct {
		name        string
		got         *store.Entry
		err         error
		skip, retry bool
	}{
		{"recovered", moved, nil, false, false},
		{"moved on before the move", nil, fmt.Errorf("x: %w", store.ErrWrongStatus), true, false},
		{"deleted before the move", nil, fmt.Errorf("x: %w", store.ErrNotFound), true, false},
		{"chain past the walk's bound", moved, fmt.Errorf("x: %w", store.ErrChainTooLong), false, false},
		{"corrupt ancestor", moved, fmt.Errorf("x: %w", store.ErrCorrupt), false, false},
		{"Firestore unavailable after the move", moved, unavailable, false, true},
		{"Firestore unavailable before the move", nil, unavailable, false, true},
		{"corrupt entry, not moved", nil, fmt.Errorf("x: %w", store.ErrCorrupt), false, true},
	}
	for _, tc := range tests {
		skip, retry := h.recovered(context.Background(), e, tc.got, tc.err)
		if (skip != nil) != tc.skip || (retry != nil) != tc.retry {
			t.Errorf("recovered(%s) = skip %v, retry %v; want skip %v, retry %v", tc.name, skip, retry, tc.skip, tc.retry)
		}
	}
}
