package store

import (
	"context"
	"time"

	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file holds the operator's triage policy override
// (triage-policy/current). classify and replay read it through
// triage.Loader; dlqctl shows and applies it through these.

// PolicyOverride is the stored override document, as written: its YAML may
// be invalid (then it is not in force).
type PolicyOverride struct {
	YAML      string
	UpdatedAt time.Time
}

// PolicyOverride reads the override; found is false when there is none
// (the embedded default is in force).
func (s *Store) PolicyOverride(ctx context.Context) (o PolicyOverride, found bool, err error) {
	snap, err := fetch(ctx, s, s.fs.Collection(triage.OverrideCollection).Doc(triage.OverrideDoc))
	if err != nil || snap == nil {
		return PolicyOverride{}, false, err
	}
	if y, ok := snap.Data()[triage.OverrideField].(string); ok {
		o.YAML = y
	}
	if t, ok := snap.Data()["updated_at"].(time.Time); ok {
		o.UpdatedAt = t
	}
	return o, true, nil
}

// PolicyInForce is the triage policy a freshly started classify or replay
// evaluates, and the stored override it comes from.
type PolicyInForce struct {
	// Policy is the override laid over the embedded default
	// (triage.ParseOverride) when it is valid, the default otherwise.
	Policy *triage.Policy
	// Override is the stored override as written; Stored is false when
	// there is none.
	Override PolicyOverride
	Stored   bool
	// Invalid is why a stored override is not in force (running instances
	// keep the policy they had; new ones use the default).
	Invalid error
}

// PolicyInForce reads the override and decides it as triage.Loader does on
// a fresh instance. An override that cannot be read is an error, so that no
// caller claims the default is in force.
func (s *Store) PolicyInForce(ctx context.Context) (PolicyInForce, error) {
	o, found, err := s.PolicyOverride(ctx)
	if err != nil {
		return PolicyInForce{}, err
	}
	in := PolicyInForce{Policy: triage.Default(), Override: o, Stored: found}
	if found {
		p, err := triage.ParseOverride([]byte(o.YAML))
		if err != nil {
			in.Invalid = err
		} else {
			in.Policy = p
		}
	}
	return in, nil
}

// SavePolicyOverride validates doc and stores it as the override
// (triage.SaveOverride: an invalid document is refused before it is
// written). It returns the policy's version.
func (s *Store) SavePolicyOverride(ctx context.Context, doc []byte) (string, error) {
	v, err := triage.SaveOverride(ctx, s.fs, doc)
	if !triage.IsInvalid(err) {
		s.wrote(1)
	}
	return v, err
}
