package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/httpfunc"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/outcome"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the tenant recovery API (docs/console.md, "The tenant recovery
// API"). The bearer key names the tenant; every read and action is scoped to
// it inside the query (store.Query.Tenant, operator's tenant argument), never
// filtered after. A tenant path other than the key's, and an entry of another
// tenant, answer 404 with the same body as an entry that does not exist.

// API limits.
const (
	DefaultPageSize = 50
	MaxPageSize     = 200
	maxBodyBytes    = 16 << 10
)

// listParams are the list route's query parameters; any other is refused.
var listParams = map[string]bool{"status": true, "category": true, "reason": true, "agent": true, "page_size": true, "page_token": true}

// apiError is the body of every refusal: {"error": {"code", "message"}}.
type apiError struct {
	status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_argument", fmt.Sprintf(format, args...)}
}

var (
	errAPIUnauthenticated = &apiError{http.StatusUnauthorized, "unauthenticated", "a valid tenant key is required (Authorization: Bearer <key>)"}
	errAPINotFound        = &apiError{http.StatusNotFound, "not_found", "no such entry"}
)

func (s *Server) routeAPI(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/openapi.json", serveOpenAPI)
	mux.Handle("GET /api/v1/tenants/{tenant}/entries", s.tenantRoute(s.apiList))
	mux.Handle("GET /api/v1/tenants/{tenant}/entries/{entry}", s.tenantRoute(s.apiGet))
	mux.Handle("POST /api/v1/tenants/{tenant}/entries/{entry}", s.tenantRoute(s.apiAction))
	s.routeWebhooks(mux)
	s.routeTriage(mux)
	mux.Handle("/api/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, &apiError{http.StatusNotFound, "not_found", "no such route"})
	}))
}

// tenantCall is an authenticated API request: the key's tenant and key id,
// and the key itself, which signs the page tokens it is given (pageToken).
type tenantCall struct {
	tenant, keyID string
	key           string
}

// pageToken is the token of the page after cur for this call's listing:
// the cursor, signed with the caller's key (HMAC-SHA256 over the tenant and
// the cursor). So a token is checked without reading anything: one this
// key's listing did not make (forged, another tenant's, another key's) is
// refused whether or not the entry it names exists, which it need not any
// more (the TTL may have deleted it since).
func (c tenantCall) pageToken(cur store.Cursor) string {
	if cur.IsZero() {
		return ""
	}
	enc := cur.Encode()
	return enc + "." + base64.RawURLEncoding.EncodeToString(c.tokenMAC(enc))
}

// cursorOf reads a token pageToken made with this call's key.
func (c tenantCall) cursorOf(token string) (store.Cursor, error) {
	enc, sig, ok := strings.Cut(token, ".")
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil || !hmac.Equal(mac, c.tokenMAC(enc)) {
		return store.Cursor{}, badRequest("page_token is not a token this listing made (with this key)")
	}
	cur, err := store.ParseCursor(enc)
	if err != nil {
		return store.Cursor{}, badRequest("page_token is not a token this listing made (with this key)")
	}
	return cur, nil
}

func (c tenantCall) tokenMAC(enc string) []byte {
	m := hmac.New(sha256.New, []byte(c.key))
	m.Write([]byte("jsdlq page token\x00" + c.tenant + "\x00" + enc))
	return m.Sum(nil)
}

// actor is the key, acting in the tenant role: it may act on an entry only
// where the entry's rule grants tenants (shared/authority).
func (c tenantCall) actor() authority.Actor {
	return authority.Actor{Name: "tenant-api:" + c.tenant + ":key-" + c.keyID, Role: authority.Tenant}
}

// LogValue keeps the key out of any log line the call reaches.
func (c tenantCall) LogValue() slog.Value {
	return slog.GroupValue(slog.String("tenant", c.tenant), slog.String("key_id", c.keyID))
}

// tenantRoute authenticates the key and checks the path's tenant against
// it before the handler runs.
func (s *Server) tenantRoute(h func(w http.ResponseWriter, r *http.Request, c tenantCall) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := func() error {
			// A path no tenant can have, or a parameter no query can take,
			// is a 400 before anything is read.
			if err := checkAPIRequest(r); err != nil {
				return err
			}
			scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
				return errAPIUnauthenticated
			}
			tenant, err := s.store.VerifyTenantKey(r.Context(), key)
			if errors.Is(err, store.ErrUnknownKey) {
				s.log.WarnContext(r.Context(), "tenant key refused", "error", err.Error(), "path", event.Wire(r.URL.Path))
				return errAPIUnauthenticated
			}
			if err != nil {
				return err
			}
			if r.PathValue("tenant") != tenant {
				return errAPINotFound
			}
			// The key's format is "jsdlq_<id>_<secret>" (store.CreateTenantKey).
			return h(w, r, tenantCall{tenant: tenant, keyID: key[len("jsdlq_") : len("jsdlq_")+16], key: key})
		}()
		if err != nil {
			s.apiFail(w, r, err)
		}
	})
}

// checkAPIRequest refuses what no route can serve, before the key is
// verified: a tenant path ParseTenant refuses, and a path or query value
// that is not visible UTF-8 of at most maxParamBytes (not UTF-8, a
// control character), which the store could not even send as a query.
func checkAPIRequest(r *http.Request) error {
	if _, err := event.ParseTenant(r.PathValue("tenant")); err != nil {
		return badRequest("%s", event.Problem(err))
	}
	for _, name := range []string{"entry", "id"} {
		if err := event.CheckValue(name, r.PathValue(name), store.MaxIDBytes); err != nil {
			return badRequest("%s", event.Problem(err))
		}
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest("malformed query string")
	}
	for name, vs := range vals {
		for _, v := range vs {
			if err := event.CheckValue("parameter "+name, v, maxParamBytes); err != nil {
				return badRequest("%s", event.Problem(err))
			}
		}
	}
	return nil
}

func (s *Server) apiFail(w http.ResponseWriter, r *http.Request, err error) {
	writeAPIError(w, s.apiErrorOf(r, err, "tenant api failed"))
}

// apiErrorOf is err as the tenant API answers it: its outcome's status and
// code (shared/outcome), with a message that names no internals.
func (s *Server) apiErrorOf(r *http.Request, err error, logMsg string) *apiError {
	var ae *apiError
	var denied *authority.Denied
	out := outcome.Of(err)
	switch {
	case errors.As(err, &ae):
	case out.Kind == outcome.NotFound:
		ae = errAPINotFound
	case errors.As(err, &denied):
		// The entry's rule keeps the decision for operators: nothing was
		// changed (the refusal comes before any write).
		ae = &apiError{out.HTTP, out.Code(), denied.Reason()}
	case out.Kind == outcome.Internal:
		ae = &apiError{out.HTTP, out.Code(), "internal error"}
	default:
		ae = &apiError{out.HTTP, out.Code(), trimPrefixes(err.Error())}
	}
	if ae.status >= http.StatusInternalServerError {
		s.log.ErrorContext(r.Context(), logMsg, "error", err.Error(), "path", event.Wire(r.URL.Path))
	}
	return ae
}

// trimPrefixes keeps the last part of a wrapped error, which says what was
// wrong without the layers that led to it.
func trimPrefixes(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		return msg[i+2:]
	}
	return msg
}

func writeAPIError(w http.ResponseWriter, ae *apiError) {
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="jsdlq"`)
	}
	writeJSON(w, ae.status, apiErrorBody{Error: ae})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *Server) apiList(w http.ResponseWriter, r *http.Request, c tenantCall) error {
	q, err := s.tenantQuery(r, c)
	if err != nil {
		return err
	}
	p, err := s.store.Entries(r.Context(), q)
	if err != nil {
		return err
	}
	out := apiEntryPage{Entries: make([]apiEntrySummary, 0, len(p.Entries)), NextPageToken: c.pageToken(p.Next)}
	for _, e := range p.Entries {
		out.Entries = append(out.Entries, apiEntrySummaryOf(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// tenantQuery reads the list filters into a query of tenant's entries.
func (s *Server) tenantQuery(r *http.Request, c tenantCall) (store.Query, error) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return store.Query{}, badRequest("malformed query string")
	}
	for name, v := range vals {
		if !listParams[name] {
			return store.Query{}, badRequest("unknown parameter %q (allowed: status, category, reason, agent, page_size, page_token)", name)
		}
		if len(v) != 1 {
			return store.Query{}, badRequest("parameter %q given %d times", name, len(v))
		}
	}
	q := store.Query{Tenant: c.tenant, View: store.ListView, Limit: DefaultPageSize,
		Status: store.Status(vals.Get("status")), Category: vals.Get("category"), Reason: vals.Get("reason"), Agent: vals.Get("agent")}
	if q.Status != "" && !q.Status.Known() {
		return q, badRequest("unknown status %q", q.Status)
	}
	for name, v := range map[string]string{"category": q.Category, "reason": q.Reason, "agent": q.Agent, "page_token": vals.Get("page_token")} {
		if err := event.CheckValue(name, v, maxParamBytes); err != nil {
			return q, badRequest("%s", event.Problem(err))
		}
	}
	if q.Agent != "" {
		if _, err := event.ParseAgent(q.Agent); err != nil {
			return q, badRequest("%s", event.Problem(err))
		}
	}
	if ps := vals.Get("page_size"); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > MaxPageSize {
			return q, badRequest("page_size %q is not a number from 1 to %d", ps, MaxPageSize)
		}
		q.Limit = n
	}
	if tok := vals.Get("page_token"); tok != "" {
		cur, err := c.cursorOf(tok)
		if err != nil {
			return q, err
		}
		q.After = cur
	}
	return q, nil
}

// entryID checks a path's entry id: the canonical document id of an event
// id (store.EventID), so no other string reaches Firestore as a path.
func entryID(raw string) (string, error) {
	if _, err := store.EventID(raw); err != nil || raw == "" {
		return "", badRequest("malformed entry id")
	}
	return raw, nil
}

func (s *Server) apiGet(w http.ResponseWriter, r *http.Request, c tenantCall) error {
	id, err := entryID(r.PathValue("entry"))
	if err != nil {
		return err
	}
	n, err := versionParam(r)
	if err != nil {
		return badRequest("%v", err)
	}
	e, err := s.store.GetMeta(r.Context(), id)
	if err != nil {
		return err
	}
	if e.Tenant != c.tenant {
		return errAPINotFound
	}
	out, err := apiEntryOf(e)
	if err != nil {
		return err
	}
	out.PayloadVersion = max(n, 1)
	if out.Payload, err = s.store.VersionPayload(r.Context(), e, out.PayloadVersion); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// apiAction is POST .../entries/{entry}:replay and :discard (the action is
// the part after the last colon; an entry id never holds one, EntryID
// encodes it).
func (s *Server) apiAction(w http.ResponseWriter, r *http.Request, c tenantCall) error {
	raw, verb, ok := cutLast(r.PathValue("entry"), ":")
	if !ok || verb != "replay" && verb != "discard" {
		return &apiError{http.StatusNotFound, "not_found", "no such route (POST …/entries/{entry}:replay or :discard)"}
	}
	id, err := entryID(raw)
	if err != nil {
		return err
	}
	var body apiReasonBody
	if err := readJSON(r, &body, verb == "discard"); err != nil {
		return err
	}
	var e *store.Entry
	switch verb {
	case "replay":
		e, err = s.tenantReplay(r, c, id)
	case "discard":
		reason, rerr := reasonOf(body.Reason, "a discard")
		if rerr != nil {
			return badRequest("%v", rerr)
		}
		e, err = s.actions.Discard(r.Context(), c.tenant, id, reason, c.actor())
	}
	var note string
	switch {
	case errors.Is(err, operator.ErrTaskNotCreated) && e != nil:
		// Recorded: a retry would find the entry moved on. Its task is
		// reconcile's to create.
		s.log.WarnContext(r.Context(), "tenant api action recorded, its replay task left to reconcile", "error", err.Error(), "entry_id", id)
		note = "the action is recorded; its replay task could not be created yet and is created by jsdlq's next reconcile run"
	case err != nil:
		return err
	}
	out, err := apiEntryOf(e)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, apiActionResult{Entry: out, Note: note})
	return nil
}

// tenantReplay replays now what is scheduled or held, and approves (no
// edits) what waits for a human; the replay meets the breaker and the
// idempotency record either way.
func (s *Server) tenantReplay(r *http.Request, c tenantCall, id string) (*store.Entry, error) {
	cur, err := s.store.GetMeta(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if cur.Tenant != c.tenant {
		return nil, errAPINotFound
	}
	// The action is the one for the status read, and only for it: an
	// entry that moved on meanwhile is a 409, not another action.
	asked := operator.Asked{Only: []store.Status{cur.Status}}
	for _, st := range operator.Approvable {
		if cur.Status == st {
			return s.actions.Approve(r.Context(), c.tenant, id, operator.Edits{By: c.actor(), Asked: asked})
		}
	}
	return s.actions.ReplayNowIn(r.Context(), c.tenant, id, c.actor(), asked)
}

// readJSON decodes an optional (or required) small JSON object body with
// no unknown fields.
func readJSON(r *http.Request, v any, required bool) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBodyBytes))
	if err != nil {
		return badRequest("body over %d bytes", maxBodyBytes)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		if required {
			return badRequest(`a JSON body {"reason": "..."} is required`)
		}
		return nil
	}
	if err := httpfunc.DecodeStrict(b, v); err != nil {
		return badRequest("body is not the expected JSON object")
	}
	return nil
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
