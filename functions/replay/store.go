package replay

import (
	"context"

	"github.com/jsdlq/jsdlq/shared/store"
)

// Store is the part of the store a replay uses (*store.Store): the
// entry's moves (with and without a read first), its completion record,
// the payload version to send, and the tenant's breaker (admission and
// the probe it may hand back).
type Store interface {
	Transition(ctx context.Context, id string, c store.Change) (*store.Entry, error)
	TransitionSeen(ctx context.Context, e *store.Entry, c store.Change) (*store.Entry, error)
	MarkRecovered(ctx context.Context, id string, from []store.Status, by, note string) (*store.Entry, error)
	Completion(ctx context.Context, e *store.Entry) (store.Completion, error)
	VersionPayload(ctx context.Context, e *store.Entry, n int) ([]byte, error)
	BreakerAdmit(ctx context.Context, tenant, entryID, by string) (ok, probe bool, err error)
	ReleaseProbe(ctx context.Context, e *store.Entry, by string) (released bool, err error)
}
