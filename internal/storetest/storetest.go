// Package storetest moves entries for tests the way jsdlq's components do,
// through the moves the status table allows (store.Moves).
package storetest

import (
	"context"
	"fmt"

	"github.com/jsdlq/jsdlq/shared/store"
)

// Refuse is the replay function's two moves when it takes a scheduled entry
// and stops short of a publish (it cannot publish the payload, the policy
// or the breaker says no): the claim, then the move into to (escalated,
// held, …) noted note, as by. It returns the entry as the second move left it.
func Refuse(ctx context.Context, st *store.Store, id string, to store.Status, by, note string) (*store.Entry, error) {
	if _, err := st.Transition(ctx, id, store.Change{From: store.MoveClaim.From, To: store.Replaying, By: by}); err != nil {
		return nil, fmt.Errorf("storetest: claim %s: %w", id, err)
	}
	e, err := st.Transition(ctx, id, store.Change{From: store.MoveGate.From, To: to, By: by, Note: note})
	if err != nil {
		return nil, fmt.Errorf("storetest: %s to %s: %w", id, to, err)
	}
	return e, nil
}
