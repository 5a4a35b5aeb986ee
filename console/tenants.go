package console

import (
	"net/http"
	"sort"
	"strings"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the tenants and breakers page and its breaker actions.

// tenantsData is the tenants and breakers page.
type tenantsData struct {
	Breakers []*store.Breaker
	// Override: the operator's role may close a breaker or send a probe.
	Override bool
}

func (s *Server) tenants(r *http.Request) (string, string, any, error) {
	bs, err := s.store.ListBreakers(r.Context(), store.BreakerStates(), 500)
	if err != nil {
		return "", "", nil, err
	}
	sort.Slice(bs, func(i, j int) bool {
		if bs[i].State != bs[j].State {
			return bs[i].State > bs[j].State // open, half_open, closed
		}
		return bs[i].Tenant < bs[j].Tenant
	})
	override := authority.May(actorOf(r), authority.Breaker, authority.Grant{}) == nil
	return "tenants", "Tenants and breakers", tenantsData{Breakers: bs, Override: override}, nil
}

// breakerAction closes a tenant's breaker, or sends an entry as its probe.
func (s *Server) breakerAction(_ http.ResponseWriter, r *http.Request, who authority.Actor) (string, error) {
	tenant, err := pathTenant(r.PathValue("tenant"))
	if err != nil {
		return "", err
	}
	reason, err := reasonOf(r.PostFormValue("reason"), "a breaker action")
	if err != nil {
		return "", err
	}
	switch r.PathValue("action") {
	case "close":
		if _, err := s.actions.CloseBreaker(r.Context(), tenant, who, reason); err != nil {
			return "", err
		}
		return "/tenants?done=breaker-closed", nil
	case "probe":
		id, err := pathEntry(strings.TrimSpace(r.PostFormValue("entry")))
		if err != nil {
			return "", uiBad("a probe names a held or scheduled entry of the tenant")
		}
		_, err = s.actions.ProbeNow(r.Context(), tenant, id, who, reason)
		return s.recorded(r, err, "/tenants", "probe-sent", "replay-task-pending")
	}
	return "", &uiError{http.StatusNotFound, "no such action"}
}
