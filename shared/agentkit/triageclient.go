package agentkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
)

// This file answers triage tasks over the console's authenticated triage
// endpoint (docs/contracts.md, "Triage answers"), for a triage agent that
// does not run next to the store: TriageClient is the Answerer that sends
// an answer there, where the operator package applies it under the same
// gates, authority rule and history as an in-process answer. The TypeScript
// kit's TriageClient speaks the same wire types.

// TriagePath is the console API's triage endpoint.
const TriagePath = "/api/v1/triage/answers"

// TriageRequest is the body of a POST to TriagePath: the triage task as the
// agent received it and its answer.
type TriageRequest struct {
	Task   event.TriageTask `json:"task"`
	Answer string           `json:"answer"`
	// Payload is the replay's new payload version (approve, replay);
	// absent keeps the stored one.
	Payload    []byte            `json:"payload,omitempty"`
	SetHeaders map[string]string `json:"set_headers,omitempty"`
	Reason     string            `json:"reason,omitempty"`
}

// TriageResponse is the endpoint's answer to an applied answer.
type TriageResponse struct {
	// Status is the entry's status after the answer.
	Status string `json:"status"`
	// Note says what is left to jsdlq (the answer is recorded, its replay
	// task left to reconcile); absent otherwise.
	Note string `json:"note,omitempty"`
}

// Request is the body that sends a to task's entry.
func (a TriageAnswer) Request(task event.TriageTask) TriageRequest {
	return TriageRequest{Task: task, Answer: a.Answer, Payload: a.Payload, SetHeaders: a.SetHeaders, Reason: a.Reason}
}

// TriageAnswer is the answer r carries.
func (r TriageRequest) TriageAnswer() TriageAnswer {
	return TriageAnswer{Answer: r.Answer, Payload: r.Payload, SetHeaders: r.SetHeaders, Reason: r.Reason}
}

// TokenFunc returns the bearer token of a request to the triage endpoint:
// a Google ID token of the triage agent's identity for the endpoint's
// audience (google.golang.org/api/idtoken.NewTokenSource on Google Cloud).
type TokenFunc func(ctx context.Context) (string, error)

// TriageClient is an Answerer that sends answers to a console's triage
// endpoint.
type TriageClient struct {
	url   string
	token TokenFunc
	http  *http.Client
}

// TriageClientOption configures NewTriageClient.
type TriageClientOption func(*TriageClient)

// WithTriageHTTPClient sets the HTTP client of a TriageClient (default: one
// with a 30 s timeout).
func WithTriageHTTPClient(c *http.Client) TriageClientOption {
	return func(t *TriageClient) { t.http = c }
}

// NewTriageClient returns a client of the console API at baseURL (its
// triage endpoint is baseURL + TriagePath), authenticating with token.
func NewTriageClient(baseURL string, token TokenFunc, opts ...TriageClientOption) *TriageClient {
	t := &TriageClient{url: strings.TrimSuffix(baseURL, "/") + TriagePath, token: token, http: &http.Client{Timeout: 30 * time.Second}}
	for _, o := range opts {
		o(t)
	}
	return t
}

// AnswerTriage sends a to task's entry. The console records the answer as
// the identity its token proves ("agent:<email>", role triage_agent), not
// by: an identity cannot claim another's name. Its refusals are reported
// with this package's errors: 400 ErrBadAnswer, 403 ErrTriageRefused and
// authority.ErrPermissionDenied (the entry's rule does not grant the
// triage agent), 404 ErrTriageNotFound, 409 ErrTriageDecided, 422
// ErrTriageRefused; an answer recorded whose replay task was left to
// reconcile is ErrTriageUnfinished with the status. Anything else (no
// token, 401, 5xx, a network failure) is an error a retry can help.
func (t *TriageClient) AnswerTriage(ctx context.Context, task event.TriageTask, a TriageAnswer, _ string) (string, error) {
	body, err := json.Marshal(a.Request(task))
	if err != nil {
		return "", fmt.Errorf("agentkit: triage answer to entry %s: %w", task.EntryID, err)
	}
	tok, err := t.token(ctx)
	if err != nil {
		return "", fmt.Errorf("agentkit: token for the triage endpoint: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("agentkit: triage endpoint: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := t.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("agentkit: post the triage answer to entry %s: %w", task.EntryID, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("agentkit: read the triage endpoint's answer: %w", err)
	}
	if resp.StatusCode == http.StatusOK {
		var out TriageResponse
		if err := json.Unmarshal(raw, &out); err != nil || out.Status == "" {
			return "", fmt.Errorf("agentkit: the triage endpoint's answer %q is not a TriageResponse", raw)
		}
		if out.Note != "" {
			return out.Status, fmt.Errorf("%w: %s", ErrTriageUnfinished, out.Note)
		}
		return out.Status, nil
	}
	return "", TriageStatusError(resp.StatusCode, raw)
}

// TriageStatusError is the error of a refusal the triage endpoint answered
// with status code and body (an Error: {"error": {"code", "message"}}).
func TriageStatusError(code int, body []byte) error {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Code + ": " + e.Error.Message
	}
	switch code {
	case http.StatusBadRequest:
		return fmt.Errorf("%w: %s", ErrBadAnswer, msg)
	case http.StatusForbidden:
		return fmt.Errorf("%w: %w: %s", ErrTriageRefused, authority.ErrPermissionDenied, msg)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %s", ErrTriageNotFound, msg)
	case http.StatusConflict:
		return fmt.Errorf("%w: %s", ErrTriageDecided, msg)
	case http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: %s", ErrTriageRefused, msg)
	}
	return errors.New("agentkit: the triage endpoint answered " + http.StatusText(code) + ": " + msg)
}
