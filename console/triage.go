package console

import (
	"errors"
	"io"
	"net/http"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/httpfunc"
)

// This file is the triage endpoint of the API (docs/console.md, "The
// triage endpoint"): a triage agent that does not run next to the store (the
// TypeScript kit's, or a Go agent elsewhere) answers its triage tasks here,
// and the operator package applies the answer in-process, under the gates,
// the authority rule and the history an in-process answer meets
// (operator.Operator.TriageAnswerer). The caller proves a Google identity
// with an ID token (shared/auth); the identities configured as triage agents
// act in the triage_agent role, recorded as "agent:<email>". The task's
// tenant scopes every read and write, as a tenant key's does.

// maxTriageBodyBytes bounds a triage answer: a payload edit up to NATS's
// default max payload (1 MiB), base64 in JSON, and the task.
const maxTriageBodyBytes = 2 << 20

// TriageAuth verifies the identity behind a request to the triage endpoint
// (*auth.Authenticator): an error wrapping auth.ErrUnauthenticated or
// auth.ErrForbidden is a 401, auth.ErrUnavailable a 503.
type TriageAuth interface {
	Authenticate(r *http.Request) (auth.Identity, error)
}

// WithTriage serves the triage endpoint: callers a verifies answer
// through answerer (operator.Operator.TriageAnswerer). Without it the
// endpoint is not served (404).
func WithTriage(a TriageAuth, answerer agentkit.Answerer) Option {
	return func(s *Server) { s.triageAuth, s.triage = a, answerer }
}

var errTriageUnauthenticated = &apiError{http.StatusUnauthorized, "unauthenticated",
	"a Google ID token of a configured triage agent's identity, for this endpoint's audience, is required (Authorization: Bearer <token>)"}

func (s *Server) routeTriage(mux *http.ServeMux) {
	if s.triage == nil || s.triageAuth == nil {
		return
	}
	mux.HandleFunc("POST "+agentkit.TriagePath, func(w http.ResponseWriter, r *http.Request) {
		if err := s.answerTriage(w, r); err != nil {
			s.triageFail(w, r, err)
		}
	})
}

func (s *Server) answerTriage(w http.ResponseWriter, r *http.Request) error {
	id, err := s.triageAuth.Authenticate(r)
	switch {
	case errors.Is(err, auth.ErrUnavailable):
		s.log.WarnContext(r.Context(), "triage endpoint: token keys unavailable", "error", err.Error())
		return &apiError{http.StatusServiceUnavailable, "unavailable", "the keys that verify tokens cannot be fetched now; retry later"}
	case err != nil:
		s.log.WarnContext(r.Context(), "triage answer refused", "error", err.Error())
		return errTriageUnauthenticated
	}
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxTriageBodyBytes))
	if err != nil {
		return badRequest("body over %d bytes", maxTriageBodyBytes)
	}
	var req agentkit.TriageRequest
	if err := httpfunc.DecodeStrict(b, &req); err != nil {
		return badRequest("body is not a triage answer: {\"task\": <the jsdlq.triage.v1 task>, \"answer\": ...}")
	}
	task := req.Task
	if err := agentkit.CheckTriage(task); err != nil {
		return badRequest("%s", trimPrefixes(err.Error()))
	}
	// The answer applies to the decision the task asked about, the status
	// it names and the moment the entry entered it: without that moment a
	// late answer could decide a newer question of the same entry.
	if task.At.IsZero() {
		return badRequest("the task's at is required: the answer applies to the decision the task asked about")
	}
	if _, err := event.ParseStoredTenant(task.Tenant); err != nil {
		return badRequest("%s", event.Problem(err))
	}
	if _, err := entryID(task.EntryID); err != nil {
		return err
	}
	a := req.TriageAnswer()
	if err := a.Check(task); err != nil {
		return badRequest("%s", trimPrefixes(err.Error()))
	}
	if a.Answer == event.AnswerDiscard {
		reason, err := reasonOf(a.Reason, "a discard")
		if err != nil {
			return badRequest("%v", err)
		}
		a.Reason = reason
	}
	status, err := s.triage.AnswerTriage(r.Context(), task, a, agentkit.TriageActor(id.Email))
	out := agentkit.TriageResponse{Status: status}
	switch {
	case errors.Is(err, agentkit.ErrTriageUnfinished):
		s.log.WarnContext(r.Context(), "triage answer recorded, its replay task left to reconcile", "error", err.Error(), "entry_id", event.Wire(task.EntryID))
		out.Note = "the answer is recorded; its replay task could not be created yet and is created by jsdlq's next reconcile run"
	case err != nil:
		return err
	}
	s.log.InfoContext(r.Context(), "triage answer applied", "entry_id", event.Wire(task.EntryID), "tenant", event.Wire(task.Tenant),
		"answer", a.Answer, "status", status, "actor", event.Wire(agentkit.TriageActor(id.Email)))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// triageFail answers a refused or failed triage answer with the status its
// outcome has on the wire (agentkit.TriageStatusError reads it back).
func (s *Server) triageFail(w http.ResponseWriter, r *http.Request, err error) {
	ae := s.apiErrorOf(r, err, "triage answer failed")
	if errors.Is(err, agentkit.ErrTriageDecided) {
		ae.Message = "the entry is no longer waiting for this decision: " + ae.Message
	}
	writeAPIError(w, ae)
}
