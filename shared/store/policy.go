package store

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file holds the operator's triage policy override
// (triage-policy/current). classify and replay read it through a
// triage.Loader over this store (PolicyOverrideYAML); dlqctl and the console
// show and apply it through these.

// Firestore location of the operator's override.
const (
	PolicyOverrideCollection = "triage-policy"
	PolicyOverrideDoc        = "current"
	PolicyOverrideField      = "yaml"
)

// The store is the triage loader's source of the override.
var _ triage.OverrideSource = (*Store)(nil)

// PolicyOverrideYAML is the override's YAML as written (triage.OverrideSource);
// found is false when there is none.
func (s *Store) PolicyOverrideYAML(ctx context.Context) (doc []byte, found bool, err error) {
	o, found, err := s.PolicyOverride(ctx)
	return []byte(o.YAML), found, err
}

// PolicyOverride is the stored override document, as written: its YAML may
// be invalid (then it is not in force).
type PolicyOverride struct {
	YAML      string
	UpdatedAt time.Time
}

// PolicyOverride reads the override; found is false when there is none
// (the embedded default is in force).
func (s *Store) PolicyOverride(ctx context.Context) (o PolicyOverride, found bool, err error) {
	snap, err := fetch(ctx, s, s.policyOverrideRef())
	if err != nil || snap == nil {
		return PolicyOverride{}, false, err
	}
	if y, ok := snap.Data()[PolicyOverrideField].(string); ok {
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

// SavePolicyOverride validates doc as an override (laid over the default:
// triage.ParseOverride) and stores it; an invalid document is refused before
// it is written. It returns the effective policy's version.
func (s *Store) SavePolicyOverride(ctx context.Context, doc []byte) (string, error) {
	p, err := triage.ParseOverride(doc)
	if err != nil {
		return "", err
	}
	_, err = s.policyOverrideRef().Set(ctx, map[string]any{
		PolicyOverrideField: string(doc),
		"version":           p.Version(),
		"updated_at":        firestore.ServerTimestamp,
	})
	s.wrote(1)
	if err != nil {
		return "", fmt.Errorf("firestore set %s/%s: %w", PolicyOverrideCollection, PolicyOverrideDoc, err)
	}
	return p.Version(), nil
}

func (s *Store) policyOverrideRef() *firestore.DocumentRef {
	return s.fs.Collection(PolicyOverrideCollection).Doc(PolicyOverrideDoc)
}
