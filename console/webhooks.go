package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// This file is the tenant API's webhook routes: a tenant lists, adds and
// removes its own endpoints with its key, scoped like the entries routes
// (the path's tenant must be the key's; another tenant's endpoint answers
// 404 like one that does not exist). Adding answers the signing secret, the
// only time it is shown (it is stored sealed); a URL jsdlq must not call is
// refused (400) before anything is written.

// WithWebhookGuard sets which endpoints may be added (default: a strict
// guard, https to public addresses only).
func WithWebhookGuard(g *webhook.Guard) Option { return func(s *Server) { s.hooks = g } }

// WithSecrets seals the signing secrets of the endpoints tenants add
// (*secretbox.Box). Without it adding an endpoint answers 503: a secret is
// never stored in clear.
func WithSecrets(box hooksecret.Box) Option { return func(s *Server) { s.secrets = box } }

var errNoWebhook = &apiError{http.StatusNotFound, "not_found", "no such webhook"}

func (s *Server) routeWebhooks(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/tenants/{tenant}/webhooks", s.tenantRoute(s.apiWebhooks))
	mux.Handle("POST /api/v1/tenants/{tenant}/webhooks", s.tenantRoute(s.apiAddWebhook))
	mux.Handle("DELETE /api/v1/tenants/{tenant}/webhooks/{id}", s.tenantRoute(s.apiRemoveWebhook))
}

func (s *Server) apiWebhooks(w http.ResponseWriter, r *http.Request, c tenantCall) error {
	hooks, err := s.store.ListWebhooks(r.Context(), c.tenant)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, apiWebhookListOf(hooks))
	return nil
}

func (s *Server) apiAddWebhook(w http.ResponseWriter, r *http.Request, c tenantCall) error {
	var body apiAddWebhookBody
	if err := readJSON(r, &body, false); err != nil {
		return err
	}
	if body.URL == "" {
		return badRequest(`a JSON body {"url": "https://..."} is required`)
	}
	g := s.hooks
	if g == nil {
		g = webhook.NewGuard()
	}
	u, err := g.Check(r.Context(), body.URL)
	if errors.Is(err, webhook.ErrOwnUnknown) {
		return &apiError{http.StatusServiceUnavailable, "unavailable", "the endpoint cannot be checked now; retry"}
	}
	if err != nil {
		return badRequest("%s", strings.TrimPrefix(err.Error(), "webhook: "))
	}
	if s.secrets == nil {
		return &apiError{http.StatusServiceUnavailable, "unavailable", "webhooks cannot be added: no key seals their secrets (SECRETS_KMS_KEY)"}
	}
	hook, sec, err := hooksecret.Create(r.Context(), s.store, s.secrets, c.tenant, u.String(), c.actor().Name)
	if errors.Is(err, store.ErrWebhookRefused) {
		return &apiError{http.StatusConflict, "failed_precondition", trimPrefixes(err.Error())}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, apiAddedWebhook{Webhook: apiWebhookOf(hook), Secret: sec.Reveal()})
	return nil
}

func (s *Server) apiRemoveWebhook(w http.ResponseWriter, r *http.Request, c tenantCall) error {
	id := r.PathValue("id")
	err := s.store.DeleteWebhook(r.Context(), c.tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return errNoWebhook
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, apiRemovedWebhook{Removed: id})
	return nil
}
