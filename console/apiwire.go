package console

import (
	"slices"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the tenant API's wire types (docs/console.md, "Wire types"):
// what the API answers and accepts, never the storage structs, so a field
// the store adds or renames does not reach tenants by accident. Each type is
// the schema of openapi.json named in its comment (a test holds the two
// together), and each is made from the store's aggregate by one function.
//
// The shape's rules: a value that is not there is left out (a time not set,
// a string not known), a value that is a fact is always there (false, zero
// replays); arrays and the headers object are always there, empty when
// there is nothing in them; and whoever acted is shown by role only, never
// by name (actorRole).

// apiEntrySummary is an entry in a listing (schema EntryFields, closed as
// EntrySummary): exactly the fields store.ListView reads.
type apiEntrySummary struct {
	ID             string    `json:"id"`
	EventID        string    `json:"event_id"`
	Stream         string    `json:"stream"`
	StreamSeq      int64     `json:"stream_seq"`
	Subject        string    `json:"subject,omitempty"`
	Tenant         string    `json:"tenant"`
	Agent          string    `json:"agent,omitempty"`
	TaskID         string    `json:"task_id,omitempty"`
	TaskType       string    `json:"task_type,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Status         string    `json:"status"`
	Category       string    `json:"category"`
	ReasonCode     string    `json:"reason_code"`
	Rule           string    `json:"rule,omitempty"`
	Action         string    `json:"action"`
	Strategy       string    `json:"strategy,omitempty"`
	PolicyVersion  string    `json:"policy_version"`
	Replays        int       `json:"replays"`
	NextRetryAt    time.Time `json:"next_retry_at,omitzero"`
	ReplayOf       string    `json:"replay_of,omitempty"`
	RootID         string    `json:"root_id"`
	PayloadSize    int64     `json:"payload_size"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func apiEntrySummaryOf(e *store.Entry) apiEntrySummary {
	return apiEntrySummary{ID: e.ID, EventID: e.EventID, Stream: e.Stream, StreamSeq: e.StreamSeq, Subject: e.Subject,
		Tenant: e.Tenant, Agent: e.Agent, TaskID: e.TaskID, TaskType: e.TaskType, IdempotencyKey: e.IdempotencyKey,
		Status: string(e.Status), Category: e.Category, ReasonCode: e.ReasonCode, Rule: e.Rule, Action: e.Action,
		Strategy: e.Strategy, PolicyVersion: e.PolicyVersion, Replays: e.Replays, NextRetryAt: e.NextRetryAt,
		ReplayOf: e.ReplayOf, RootID: e.RootID, PayloadSize: e.PayloadSize, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
}

// apiEntry is one entry (schema Entry): the summary's fields and the rest
// of what a tenant may know about its dead task. Payload and
// PayloadVersion (the version Payload holds) are set only by the route
// that reads one entry, Payload there only when jsdlq has it.
type apiEntry struct {
	apiEntrySummary
	Consumer string `json:"consumer,omitempty"`
	// Headers are as the event carries them (docs/contracts.md): a name or
	// value that is not UTF-8 is "jsdlq-b64:" and its base64.
	Headers          map[string][]string `json:"headers"`
	Payload          []byte              `json:"payload,omitzero"`
	PayloadVersion   int                 `json:"payload_version,omitempty"`
	ReplayVersion    int                 `json:"replay_version"`
	PayloadVersions  []apiPayloadVersion `json:"payload_versions"`
	PayloadSHA256    string              `json:"payload_sha256,omitempty"`
	PayloadMissing   bool                `json:"payload_missing"`
	PayloadTruncated bool                `json:"payload_truncated"`
	PublishedAt      time.Time           `json:"published_at,omitzero"`
	Kinds            []string            `json:"kinds"`
	// Deliveries is 0 when the advisory did not say.
	Deliveries   int             `json:"deliveries,omitempty"`
	TermReason   string          `json:"term_reason,omitempty"`
	Failure      *apiFailure     `json:"failure,omitempty"`
	PublishedSeq int64           `json:"published_seq,omitempty"`
	History      []apiTransition `json:"history"`
	ResolvedAt   time.Time       `json:"resolved_at,omitzero"`
	ExpireAt     time.Time       `json:"expire_at,omitzero"`
}

// apiEntryOf is e as the API shows it, without a payload; an error only
// when e names a payload version it does not have (a corrupt document).
func apiEntryOf(e *store.Entry) (apiEntry, error) {
	next, err := e.ReplayVersion()
	if err != nil {
		return apiEntry{}, err
	}
	out := apiEntry{apiEntrySummary: apiEntrySummaryOf(e), Consumer: e.Consumer, Headers: map[string][]string{},
		ReplayVersion: next.N, PayloadSHA256: e.PayloadSHA256, PayloadMissing: e.PayloadMissing,
		PayloadTruncated: e.PayloadTruncated, PublishedAt: e.PublishedAt, Kinds: nonNil(e.Kinds), Deliveries: e.Deliveries,
		TermReason: e.TermReason, Failure: apiFailureOf(e), PublishedSeq: e.PublishedSeq,
		History: make([]apiTransition, 0, len(e.History)), ResolvedAt: e.ResolvedAt, ExpireAt: e.ExpireAt}
	for name, values := range e.Headers {
		out.Headers[name] = nonNil(values)
	}
	for _, v := range e.Versions() {
		out.PayloadVersions = append(out.PayloadVersions, apiPayloadVersionOf(v))
	}
	actors := entryActors(e)
	for _, t := range e.History {
		out.History = append(out.History, apiTransitionOf(t, actors))
	}
	return out, nil
}

// entryActors are the people e records (who made each move, who authored
// each payload version), each in the role the API shows for them: a note
// may name any of them, not only whoever made its own move (an approval
// names the author of the version it replays).
func entryActors(e *store.Entry) []authority.Actor {
	var out []authority.Actor
	add := func(stored authority.Role, by string) {
		if role := actorRole(string(stored), by); by != "" && role != roleSystem {
			out = append(out, authority.Actor{Name: by, Role: authority.Role(role)})
		}
	}
	for _, t := range e.History {
		add(t.Role, t.By)
	}
	for _, v := range e.Versions() {
		if !v.Original() {
			add(v.Role, v.By)
		}
	}
	return out
}

// apiPayloadVersion is one version of the payload (schema PayloadVersion):
// the original (1) or an approved edit, its author by role only.
type apiPayloadVersion struct {
	Version int       `json:"version"`
	Base    int       `json:"base,omitempty"`
	Author  string    `json:"author"`
	At      time.Time `json:"at"`
	Size    int64     `json:"size"`
	SHA256  string    `json:"sha256,omitempty"`
	Missing bool      `json:"missing"`
	// HeadersSet are the names of the headers the version sets.
	HeadersSet []string `json:"headers_set"`
	Confirmed  []string `json:"confirmed"`
}

// authorCapture is the author of every original: the capture of the dead
// task, no one's edit.
const authorCapture = "capture"

func apiPayloadVersionOf(v store.PayloadVersion) apiPayloadVersion {
	author := authorCapture
	if !v.Original() {
		author = actorRole(string(v.Role), v.By)
	}
	return apiPayloadVersion{Version: v.N, Base: v.Base, Author: author, At: v.At, Size: v.Size, SHA256: v.SHA256,
		Missing: v.Missing, HeadersSet: nonNil(v.HeaderNames()), Confirmed: nonNil(v.Confirmed)}
}

// apiFailure is the failure record the agent sent (schema Failure).
type apiFailure struct {
	Code           string    `json:"code"`
	Detail         string    `json:"detail,omitempty"`
	Attempt        int       `json:"attempt,omitempty"`
	Agent          string    `json:"agent,omitempty"`
	CompletedSteps []string  `json:"completed_steps"`
	Retryable      *bool     `json:"retryable,omitempty"`
	ToolFailure    bool      `json:"tool_failure"`
	RecordedAt     time.Time `json:"recorded_at,omitzero"`
}

func apiFailureOf(e *store.Entry) *apiFailure {
	f := e.Failure
	if f == nil {
		return nil
	}
	return &apiFailure{Code: f.Code, Detail: f.Detail, Attempt: f.Attempt, Agent: f.Agent,
		CompletedSteps: nonNil(f.CompletedSteps), Retryable: f.Retryable, ToolFailure: f.ToolFailure, RecordedAt: f.RecordedAt}
}

// apiTransition is one status change in an entry's history (schema
// Transition): who made it by role only.
type apiTransition struct {
	At        time.Time `json:"at"`
	From      string    `json:"from,omitempty"`
	To        string    `json:"to"`
	ActorRole string    `json:"actor_role"`
	Note      string    `json:"note,omitempty"`
}

// apiTransitionOf is t as the API shows it, its note naming every one of
// actors (entryActors: the entry's people, t's own mover among them) by
// role.
func apiTransitionOf(t store.Transition, actors []authority.Actor) apiTransition {
	// The role recorded with the transition; one recorded before roles
	// were is derived from its actor. The mover's role decides what its
	// bare name becomes, so it goes first.
	role := actorRole(string(t.Role), t.By)
	if role != roleSystem {
		actors = append([]authority.Actor{{Name: t.By, Role: authority.Role(role)}}, actors...)
	}
	return apiTransition{At: t.At, From: t.From, To: t.To, ActorRole: role, Note: authority.Redact(t.Note, actors...)}
}

// Roles the API shows in place of who acted (schema ActorRole). Operator
// and approver are people on the console or dlqctl, tenant is a tenant
// key, triage_agent the triage agent's answer, system jsdlq's own
// functions (classify, replay, reconcile).
const (
	roleOperator    = string(authority.Operator)
	roleApprover    = string(authority.Approver)
	roleTenant      = string(authority.Tenant)
	roleTriageAgent = string(authority.TriageAgent)
	roleSystem      = "system"
)

// actorRoles are every role actorRole answers.
var actorRoles = []string{roleOperator, roleApprover, roleTenant, roleTriageAgent, roleSystem}

// Actor names as history records them, for the roles that are not a person
// (tenantCall.actor, agentkit.TriageActor, and the functions' own names;
// TestActorRole pins them). Transitions recorded before roles were stored
// are known by these names only.
const (
	tenantActorPrefix = "tenant-api:"
	agentActorPrefix  = "agent:"
)

var systemActors = []string{"classify", "replay", store.ByReconcile}

// actorRole is the one mapping from who acted to what the API shows: the
// role recorded with the action when there is one the API knows (stored),
// else the role derived from the actor's name. Anyone who is not a tenant
// key, the triage agent or jsdlq itself is a person with the store's or
// the console's credentials: an operator. No name, key id or address is
// ever part of the answer.
func actorRole(stored, by string) string {
	if slices.Contains(actorRoles, stored) {
		return stored
	}
	switch {
	case strings.HasPrefix(by, tenantActorPrefix):
		return roleTenant
	case strings.HasPrefix(by, agentActorPrefix):
		return roleTriageAgent
	case slices.Contains(systemActors, by):
		return roleSystem
	}
	return roleOperator
}

// apiEntryPage is the list route's answer (schema EntryPage).
type apiEntryPage struct {
	Entries       []apiEntrySummary `json:"entries"`
	NextPageToken string            `json:"next_page_token,omitempty"`
}

// apiActionResult is the answer to :replay and :discard (schema
// ActionResult): the entry as the action left it (without its payload)
// and, when the action is recorded but its replay task is not created
// yet, a note saying so.
type apiActionResult struct {
	Entry apiEntry `json:"entry"`
	Note  string   `json:"note,omitempty"`
}

// apiReasonBody is the body of :discard (reason required) and of :replay
// (optional) (schema ReasonBody).
type apiReasonBody struct {
	Reason string `json:"reason"`
}

// apiWebhook is a tenant's endpoint (schema Webhook); its secret never.
type apiWebhook struct {
	ID                  string    `json:"id"`
	Tenant              string    `json:"tenant"`
	URL                 string    `json:"url"`
	Enabled             bool      `json:"enabled"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	Deliveries          int64     `json:"deliveries"`
	LastStatus          int       `json:"last_status,omitempty"`
	LastError           string    `json:"last_error,omitempty"`
	LastAttemptAt       time.Time `json:"last_attempt_at,omitzero"`
	LastSuccessAt       time.Time `json:"last_success_at,omitzero"`
	DisabledAt          time.Time `json:"disabled_at,omitzero"`
	DisabledReason      string    `json:"disabled_reason,omitempty"`
	CreatedAt           time.Time `json:"created_at"`
	CreatedByRole       string    `json:"created_by_role"`
	EnabledAt           time.Time `json:"enabled_at,omitzero"`
	EnabledByRole       string    `json:"enabled_by_role,omitempty"`
}

func apiWebhookOf(w *store.Webhook) apiWebhook {
	out := apiWebhook{ID: w.ID, Tenant: w.Tenant, URL: w.URL, Enabled: w.Enabled, ConsecutiveFailures: w.Failures,
		Deliveries: w.Deliveries, LastStatus: w.LastStatus, LastError: w.LastError, LastAttemptAt: w.LastAttemptAt,
		LastSuccessAt: w.LastSuccessAt, DisabledAt: w.DisabledAt, DisabledReason: w.DisabledReason,
		CreatedAt: w.CreatedAt, CreatedByRole: actorRole("", w.CreatedBy), EnabledAt: w.EnabledAt}
	if w.EnabledBy != "" {
		out.EnabledByRole = actorRole("", w.EnabledBy)
	}
	return out
}

// apiWebhookList is the webhooks route's answer (schema WebhookList).
type apiWebhookList struct {
	Webhooks []apiWebhook `json:"webhooks"`
}

func apiWebhookListOf(hooks []*store.Webhook) apiWebhookList {
	out := apiWebhookList{Webhooks: make([]apiWebhook, 0, len(hooks))}
	for _, w := range hooks {
		out.Webhooks = append(out.Webhooks, apiWebhookOf(w))
	}
	return out
}

// apiAddWebhookBody is the body of an add (schema AddWebhookBody).
type apiAddWebhookBody struct {
	URL string `json:"url"`
}

// apiAddedWebhook is the answer to an add (schema AddedWebhook): the
// endpoint and its signing secret, shown this once.
type apiAddedWebhook struct {
	Webhook apiWebhook `json:"webhook"`
	Secret  string     `json:"secret"`
}

// apiRemovedWebhook is the answer to a removal (schema RemovedWebhook).
type apiRemovedWebhook struct {
	Removed string `json:"removed"`
}

// apiErrorBody is every refusal's body (schema Error).
type apiErrorBody struct {
	Error *apiError `json:"error"`
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
