package console

import (
	"net/http"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file is the policy page: the triage policy in force as classify and
// replay load it, its difference from the embedded default, and what it
// decides for an entry now. It changes nothing.

// policyData is the policy page.
type policyData struct {
	Version   string
	Source    string // "override" or "default"
	UpdatedAt time.Time
	// Invalid is why the stored override is not in force (the default
	// is then, for every instance that starts).
	Invalid   string
	IsDefault bool
	Default   string // the default's version
	Diff      []diffLine
	// Overlaid is what the override in force changes: each effective
	// rule and where it comes from, the default rules it deletes, the
	// settings it changes (nil when the default is in force).
	Overlaid *triage.Overlaid
	EntryID  string
	Test     *policyTest
}

// policyTest compares an entry's stored decision with the current policy's.
type policyTest struct {
	E *store.Entry
	// Now is the entry as the current policy would decide it
	// (store.Entry.Decide on a copy: category, reason, action, strategy,
	// rule, plan, status).
	Now                *store.Entry
	DelayMin, DelayMax time.Duration
	Replay             bool
	Chain              []string
	// Approvers are who may approve the entry now (its recorded rule's
	// grant in the current policy), and who would under the current
	// decision's rule.
	Approvers, NowApprovers string
}

func (s *Server) policy(r *http.Request) (string, string, any, error) {
	ctx := r.Context()
	vals, err := pageQuery(r, "the policy page takes one entry id", "entry")
	if err != nil {
		return "", "", nil, err
	}
	in, err := s.store.PolicyInForce(ctx)
	if err != nil {
		return "", "", nil, err
	}
	p, def := in.Policy, triage.Default()
	d := policyData{Version: p.Version(), Source: "default", Default: def.Version(), IsDefault: p.Version() == def.Version()}
	if in.Stored {
		d.UpdatedAt = in.Override.UpdatedAt
		if in.Invalid != nil {
			d.Invalid = in.Invalid.Error()
		} else {
			d.Source, d.Overlaid = "override", p.Overlaid()
		}
	}
	if !d.IsDefault {
		d.Diff = foldDiff(lineDiff(string(def.Canonical()), string(p.Canonical())), 3)
	}
	if id := strings.TrimSpace(vals.Get("entry")); id != "" {
		d.EntryID = id
		if _, err := store.EventID(id); err != nil {
			return "", "", nil, uiBad("malformed entry id")
		}
		e, err := s.store.GetMeta(ctx, id)
		if err != nil {
			return "", "", nil, err
		}
		if d.Test, err = testEntry(p, e, s.now()); err != nil {
			return "", "", nil, err
		}
	}
	return "policy", "Policy", d, nil
}

// testEntry decides e under p through the one mapping classify and replay
// use (PolicyInput, PolicyChain, Decide), on a copy of the entry, with the
// policy's delay range.
func testEntry(p *triage.Policy, e *store.Entry, now time.Time) (*policyTest, error) {
	in, err := e.PolicyInput()
	if err != nil {
		return nil, err
	}
	chain := e.PolicyChain()
	d := p.Evaluate(in, chain)
	w := *e
	w.Decide(d, now)
	t := &policyTest{E: e, Now: &w, Replay: d.Replay(), Chain: chain.Codes,
		Approvers: approversText(p.Grant(e.Rule, triage.Category(e.Category))), NowApprovers: approversText(p.Grant(w.Rule, triage.Category(w.Category)))}
	if t.Replay {
		t.DelayMin, t.DelayMax = p.DelayRange(in, chain)
	}
	return t, nil
}

// approversText names who a grant lets approve, and whether the rule or
// the category says so.
func approversText(g authority.Grant) string {
	if g.Default {
		return authority.Join(g.Who()) + " (the category's default)"
	}
	return authority.Join(g.Who())
}
