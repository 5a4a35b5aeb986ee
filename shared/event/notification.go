package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// NotificationSchema is the "schema" of every notification jsdlq publishes
// to its notifications topic (docs/notification.schema.json).
const NotificationSchema = "jsdlq.notification.v1"

// DefaultNotificationsTopic is the Pub/Sub topic notifications go to
// (NOTIFICATIONS_TOPIC; Terraform's default is the same).
const DefaultNotificationsTopic = "dlq-notifications"

// NotificationKind says what happened.
type NotificationKind string

// Kinds of notifications: an entry that needs a human, a tenant breaker
// that changed state, a reconcile alert, a tenant webhook disabled after
// its run of failures.
const (
	NotifyEscalated        NotificationKind = "escalated"
	NotifyAwaitingApproval NotificationKind = "awaiting_approval"
	NotifyQuarantined      NotificationKind = "quarantined"
	NotifyBreakerOpened    NotificationKind = "breaker_opened"
	NotifyBreakerHalfOpen  NotificationKind = "breaker_half_open"
	NotifyBreakerClosed    NotificationKind = "breaker_closed"
	NotifyAlertRaised      NotificationKind = "alert_raised"
	NotifyAlertCleared     NotificationKind = "alert_cleared"
	NotifyWebhookDisabled  NotificationKind = "webhook_disabled"
)

// NotificationKinds are all kinds, in the schema's order.
var NotificationKinds = []NotificationKind{
	NotifyEscalated, NotifyAwaitingApproval, NotifyQuarantined,
	NotifyBreakerOpened, NotifyBreakerHalfOpen, NotifyBreakerClosed,
	NotifyAlertRaised, NotifyAlertCleared, NotifyWebhookDisabled,
}

// Severities of notifications.
const (
	SeverityInfo     = "info"
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// Severity is the kind's default severity: what needs a human now is
// critical (a tenant stopped, an alert), what needs one eventually a
// warning, what resolves itself information.
func (k NotificationKind) Severity() string {
	switch k {
	case NotifyBreakerOpened, NotifyAlertRaised:
		return SeverityCritical
	case NotifyEscalated, NotifyAwaitingApproval, NotifyQuarantined, NotifyWebhookDisabled:
		return SeverityWarning
	}
	return SeverityInfo
}

// IsEntry reports whether the kind reports an entry's decision.
func (k NotificationKind) IsEntry() bool {
	return k == NotifyEscalated || k == NotifyAwaitingApproval || k == NotifyQuarantined
}

// IsBreaker reports whether the kind reports a tenant breaker's state.
func (k NotificationKind) IsBreaker() bool {
	return k == NotifyBreakerOpened || k == NotifyBreakerHalfOpen || k == NotifyBreakerClosed
}

// IsAlert reports whether the kind reports a reconcile alert.
func (k NotificationKind) IsAlert() bool { return k == NotifyAlertRaised || k == NotifyAlertCleared }

// IsWebhook reports whether the kind reports a tenant webhook's state.
func (k NotificationKind) IsWebhook() bool { return k == NotifyWebhookDisabled }

// ForTenant reports whether the tenant's own webhooks receive the kind:
// every kind but the operators' news about the webhooks themselves (a
// disabled endpoint is told to the operators, who re-enable it).
func (k NotificationKind) ForTenant() bool { return !k.IsWebhook() }

// ForTenant reports whether the tenant's own webhooks receive n: its kind is
// for tenants and it is about that tenant, not the whole pipeline.
func (n Notification) ForTenant() bool { return n.Kind.ForTenant() && !n.Pipeline }

// Triage reports whether the kind asks the triage agent for a decision.
func (k NotificationKind) Triage() bool { return k == NotifyEscalated || k == NotifyAwaitingApproval }

// Pub/Sub attribute of a notification besides kind and tenant (AttrKind,
// AttrTenant), for subscription filters and deduplication.
const (
	AttrSeverity       = "severity"
	AttrNotificationID = "notification_id"
)

// Notification is one jsdlq.notification.v1 event: exactly one per
// transition it reports (its id is derived from the transition, so a
// subscriber deduplicates a redelivery by id).
type Notification struct {
	Schema   string           `json:"schema"`
	ID       string           `json:"id"`
	Kind     NotificationKind `json:"kind"`
	Tenant   string           `json:"tenant"`
	Severity string           `json:"severity"`
	At       time.Time        `json:"at"`
	// Entry kinds.
	EntryID    string `json:"entry_id,omitempty"`
	Status     string `json:"status,omitempty"`
	Category   string `json:"category,omitempty"`
	ReasonCode string `json:"reason_code,omitempty"`
	EscalateTo string `json:"escalate_to,omitempty"`
	// Breaker kinds.
	BreakerState string `json:"breaker_state,omitempty"`
	BreakerNote  string `json:"breaker_note,omitempty"`
	// Alert kinds.
	AlertName    string `json:"alert_name,omitempty"`
	AlertMessage string `json:"alert_message,omitempty"`
	// Pipeline marks news about the whole pipeline rather than one tenant
	// (an alert with no tenant): Tenant then holds the default tenant, and
	// no tenant's webhooks receive it.
	Pipeline bool `json:"pipeline,omitempty"`
	// Webhook kinds.
	WebhookID string `json:"webhook_id,omitempty"`
	// WebhookHost is the endpoint's host (not its URL, whose path or query
	// may hold the tenant's own token).
	WebhookHost string `json:"webhook_host,omitempty"`
	Summary     string `json:"summary"`
}

// NotificationID derives the id of the notification of kind about subject
// (an entry id, a tenant, an alert name) at the transition's time: the same
// transition always yields the same id, a later one a different id. The id
// is a Firestore document id and a Nats-Msg-Id.
func NotificationID(kind NotificationKind, subject string, at time.Time) string {
	sum := sha256.Sum256([]byte(string(kind) + "\x00" + subject + "\x00" + strconv.FormatInt(at.UnixNano(), 10)))
	return "n-" + hex.EncodeToString(sum[:16])
}

// NewNotification returns a notification of kind about subject at at, its
// schema, id and severity filled in; the caller sets the kind's fields.
func NewNotification(kind NotificationKind, tenant, subject string, at time.Time) Notification {
	if tenant == "" {
		tenant = DefaultTenant
	}
	return Notification{Schema: NotificationSchema, ID: NotificationID(kind, subject, at), Kind: kind,
		Tenant: tenant, Severity: kind.Severity(), At: at.UTC()}
}

// Attributes are the Pub/Sub attributes of the notification.
func (n Notification) Attributes() map[string]string {
	return map[string]string{AttrKind: string(n.Kind), AttrTenant: n.Tenant, AttrSeverity: n.Severity, AttrNotificationID: n.ID}
}

// Validate checks what the schema requires of n.
func (n Notification) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: notification %s: %s", ErrInvalid, n.ID, fmt.Sprintf(format, a...))
	}
	switch {
	case n.Schema != NotificationSchema:
		return bad("schema %q, want %q", n.Schema, NotificationSchema)
	case n.ID == "":
		return bad("no id")
	case !n.Kind.IsEntry() && !n.Kind.IsBreaker() && !n.Kind.IsAlert() && !n.Kind.IsWebhook():
		return bad("unknown kind %q", n.Kind)
	case n.Tenant == "":
		return bad("no tenant")
	case n.Severity != SeverityInfo && n.Severity != SeverityWarning && n.Severity != SeverityCritical:
		return bad("unknown severity %q", n.Severity)
	case n.At.IsZero():
		return bad("no time")
	case n.Kind.IsEntry() && (n.EntryID == "" || n.Status == ""):
		return bad("%s without entry_id and status", n.Kind)
	case n.Kind.IsBreaker() && n.BreakerState == "":
		return bad("%s without breaker_state", n.Kind)
	case n.Kind.IsAlert() && n.AlertName == "":
		return bad("%s without alert_name", n.Kind)
	case n.Kind.IsWebhook() && n.WebhookID == "":
		return bad("%s without webhook_id", n.Kind)
	}
	return nil
}

// Encode validates and encodes n.
func (n Notification) Encode() ([]byte, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(n)
}

// DecodeNotification decodes and validates a notification; unknown fields
// are refused.
func DecodeNotification(data []byte) (Notification, error) {
	var n Notification
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&n); err != nil {
		return Notification{}, fmt.Errorf("%w: notification: %w", ErrInvalid, err)
	}
	return n, n.Validate()
}

// TriageSchema is the "schema" of a triage task's body
// (docs/triage-task.schema.json).
const TriageSchema = "jsdlq.triage.v1"

// Triage task defaults (docs/contracts.md, "The triage task"): an entry
// that is escalated or awaits approval sends its task to the agent "ceo"
// unless the policy names another, on its subject
// "<prefix>.<agent>.tasks.dlq_triage".
const (
	DefaultTriageAgent = "ceo"
	TriageTaskType     = "dlq_triage"
)

// Answers a triage agent may give (through agentkit and the operator
// package, with the same gates as a human).
const (
	AnswerApprove = "approve" // approve the proposed replay, optionally with edits
	AnswerReplay  = "replay"  // replay now
	AnswerDiscard = "discard"
)

// TriageTask is the body of the task an escalated or awaiting-approval
// entry sends its triage agent: what the agent needs to decide, and how to
// answer.
type TriageTask struct {
	Schema         string    `json:"schema"`
	NotificationID string    `json:"notification_id"`
	EntryID        string    `json:"entry_id"`
	Tenant         string    `json:"tenant"`
	Agent          string    `json:"agent"`
	TaskType       string    `json:"task_type,omitempty"`
	Status         string    `json:"status"`
	Category       string    `json:"category,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	Action         string    `json:"action,omitempty"`
	Summary        string    `json:"summary"`
	ConsoleURL     string    `json:"console_url,omitempty"`
	Answers        []string  `json:"answers"`
	At             time.Time `json:"at"`
}

// TriageAnswers are the answers available to an entry in status.
func TriageAnswers(status string) []string {
	if status == string(NotifyAwaitingApproval) {
		return []string{AnswerApprove, AnswerDiscard}
	}
	return []string{AnswerReplay, AnswerDiscard}
}

// TriageAgent is the agent an entry escalated to escalateTo is sent to.
func TriageAgent(escalateTo string) string {
	if escalateTo == "" {
		return DefaultTriageAgent
	}
	return escalateTo
}

// NewTriageTask is the triage task of an entry notification, with a link to
// the entry in the console at consoleURL ("" for none).
func NewTriageTask(n Notification, taskType, action, consoleURL string) TriageTask {
	t := TriageTask{Schema: TriageSchema, NotificationID: n.ID, EntryID: n.EntryID, Tenant: n.Tenant,
		Agent: TriageAgent(n.EscalateTo), TaskType: taskType, Status: n.Status, Category: n.Category,
		Reason: n.ReasonCode, Action: action, Summary: n.Summary, Answers: TriageAnswers(n.Status), At: n.At}
	if consoleURL != "" {
		t.ConsoleURL = strings.TrimSuffix(consoleURL, "/") + "/entries/" + n.EntryID
	}
	return t
}
