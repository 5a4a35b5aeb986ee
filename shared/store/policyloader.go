package store

import (
	"log/slog"

	"github.com/jsdlq/jsdlq/shared/triage"
)

// PolicyLoader returns the triage policy in force as classify and replay
// read it (triage.Loader over this store's override), for everything that
// evaluates the policy: the reconcile engine classifies what it
// records under the current policy, whether the function, dlqctl or the
// demo runs it.
func (s *Store) PolicyLoader(log *slog.Logger, opts ...triage.LoaderOption) *triage.Loader {
	return triage.NewLoader(s, log, opts...)
}
