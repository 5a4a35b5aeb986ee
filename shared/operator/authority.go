package operator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file is where every action meets the authority rule
// (authority.May): the approvers the policy in force grants the entry's
// rule decide what a tenant, the triage agent or an operator may do with
// it; breakers and bulk redrives are for operators and approvers. Each
// entry action checks inside its transaction, on the entry as read there.

// ErrPermissionDenied wraps every refusal by the authority rule (an
// *authority.Denied, which names the rule and the roles that may).
var ErrPermissionDenied = authority.ErrPermissionDenied

// DefaultPolicyRefresh is how long the policy the rule reads is used before
// it is read again: an operator who changes who may approve a rule waits
// at most this long, as classify and replay do for the rest of a policy.
const DefaultPolicyRefresh = triage.DefaultRefresh

// PolicyReader reads the triage policy in force; an error when it cannot
// be read, never a guess.
type PolicyReader func(ctx context.Context) (*triage.Policy, error)

// WithPolicy sets where the authority rule reads the policy from, and how
// long one read is used (0: on every action). The default is the store's
// override, or the embedded default (store.PolicyInForce), every
// DefaultPolicyRefresh.
func WithPolicy(read PolicyReader, refresh time.Duration) Option {
	return func(o *Operator) { o.policies = &policyCache{read: read, refresh: refresh} }
}

// policyCache keeps the policy one read returned for refresh. A read that
// fails with no policy read before refuses the action (the policy might
// keep the entry for approvers): the authority rule never falls back to a
// default it has not read.
type policyCache struct {
	read    PolicyReader
	refresh time.Duration

	mu sync.Mutex
	p  *triage.Policy
	at time.Time
}

func (c *policyCache) current(ctx context.Context) (*triage.Policy, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p != nil && c.refresh > 0 && time.Since(c.at) < c.refresh {
		return c.p, nil
	}
	p, err := c.read(ctx)
	switch {
	case err == nil:
		c.p, c.at = p, time.Now()
	case c.p == nil:
		return nil, fmt.Errorf("operator: read the policy that says who may act: %w", err)
	}
	// A failed re-read keeps the policy last read.
	return c.p, nil
}

func inForce(st Store) PolicyReader {
	return func(ctx context.Context) (*triage.Policy, error) {
		in, err := st.PolicyInForce(ctx)
		if err != nil {
			return nil, err
		}
		return in.Policy, nil
	}
}

// May is the authority rule for one entry: nil when by may take act on e,
// else an error wrapping ErrPermissionDenied (or the policy's read error).
// The console asks it to show an actor only the forms it may use, a bulk
// redrive to plan; each action asks it again inside its transaction.
func (o *Operator) May(ctx context.Context, by authority.Actor, act authority.Action, e *store.Entry) error {
	p, err := o.policies.current(ctx)
	if err != nil {
		return err
	}
	return permit(p, by, act, e)
}

// permit is authority.May over the grant p gives e's rule (the zero grant
// for an action on no entry).
func permit(p *triage.Policy, by authority.Actor, act authority.Action, e *store.Entry) error {
	var g authority.Grant
	if e != nil {
		g = p.Grant(e.Rule, triage.Category(e.Category))
	}
	return authority.May(by, act, g)
}
