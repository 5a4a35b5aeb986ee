package event

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Conventional message headers jsdlq reads on a task (docs/contracts.md,
// "Message headers"). Agents and publishers set them; every component reads
// them through Conventions.
const (
	HeaderTaskID         = "X-Task-ID"
	HeaderIdempotencyKey = "X-Idempotency-Key"
	HeaderTaskType       = "X-Task-Type"
	HeaderTenant         = "X-Tenant-ID"
	HeaderAgent          = "X-Agent"
	HeaderTaskVersion    = "X-Task-Version"
	HeaderCreatedAt      = "X-Created-At"
	HeaderMaxRetries     = "X-Max-Retries"
	HeaderRetryStrategy  = "X-Retry-Strategy"
)

// Headers the replay function sets on a replay (docs/contracts.md, "Message
// headers"); agents read them back with ParseReplay. ReplayPrefix marks them
// all: a replay drops every header of an earlier replay before it adds its
// own.
const (
	ReplayPrefix           = "Jsdlq-"
	HeaderReplayOf         = "Jsdlq-Replay-Of"
	HeaderReplayAttempt    = "Jsdlq-Replay-Attempt"
	HeaderStrategy         = "Jsdlq-Strategy"
	HeaderInstruction      = "Jsdlq-Instruction" // repeatable
	HeaderTargetModel      = "Jsdlq-Target-Model"
	HeaderMaxContextTokens = "Jsdlq-Max-Context-Tokens"
	HeaderMaxOutputTokens  = "Jsdlq-Max-Output-Tokens"
	// HeaderCompletedSteps names the steps the failed attempt already made,
	// one value per step, so the agent can skip them on the replay.
	HeaderCompletedSteps = "Jsdlq-Completed-Steps"
)

// HeaderEstimatedTokens is a publisher's estimate of the tokens a task will
// need (optional); the predictions bucket tasks by it when it is present.
const HeaderEstimatedTokens = "X-Estimated-Tokens"

// Headers agentkit's Publish sets before a task's first attempt (the
// predictions, docs/predictions.md). They begin with ReplayPrefix, so a
// replay never carries them: a replay is neither a first attempt nor a task
// the predictions count.
const (
	// HeaderPredictedReason is the reason code the task was predicted to
	// die with; the strategy named for it is applied (Jsdlq-Strategy) unless
	// the prediction is advisory.
	HeaderPredictedReason = "Jsdlq-Predicted-Reason"
	// HeaderPredictedProbability is the predicted probability of death
	// ("0.83"), HeaderPredictedVersion the version of the model.
	HeaderPredictedProbability = "Jsdlq-Predicted-Probability"
	HeaderPredictedVersion     = "Jsdlq-Predicted-Version"
	// HeaderCounted marks a task Publish counted as a task of its feature
	// buckets (an untreated first attempt): only the deaths of such tasks
	// are learnt from, so the counts and the deaths describe the same tasks.
	HeaderCounted = "Jsdlq-Counted"
	// HeaderPending is the number of tasks of the agent pending in the work
	// stream when the task was published (its load bucket), when known.
	HeaderPending = "Jsdlq-Pending"
)

// HeaderTriageEntry names, on a triage task, the entry the triage agent is
// asked to decide on (with X-Task-ID and X-Tenant-ID naming it too).
const HeaderTriageEntry = "Jsdlq-Triage-Entry"

// Default names of the JetStream objects jsdlq reads and writes
// (docs/configuration.md). Terraform's variable defaults must equal these (a
// test checks).
const (
	DefaultWorkStream     = "TASKS"
	DefaultAdvisoryStream = "DLQ_ADVISORIES"
	DefaultRecordStream   = "DLQ_RECORDS"
	DefaultFailureBucket  = "dlq_failures"
	DefaultBridgeConsumer = "dlq-bridge"
	// DefaultAgentSubjectPrefix begins the subject of a task:
	// "<prefix>.<agent>.tasks.<type>".
	DefaultAgentSubjectPrefix = "agents"
)

// Conventions reads a task's identity by the fixed conventions of
// docs/contracts.md: its tenant from HeaderTenant (DefaultTenant when it
// names none), its agent from HeaderAgent or its subject, and the subject
// grammar "<DefaultAgentSubjectPrefix>.<agent>.tasks.<type>". None of them
// is configurable (docs/contracts.md, "Conventions: fixed"): they are the
// wire contract both agent kits write and every component reads, so a
// deployment's own name would have to be set alike in every agent, in two
// languages, and in every function, and one that disagreed would silently
// move completion records and breakers to another tenant. It has no fields:
// the zero value is the only one.
type Conventions struct{}

// DefaultConventions are the conventions (the zero Conventions).
var DefaultConventions = Conventions{}

// Subject is a task subject read by the grammar "<prefix>.<agent>.tasks.<type>".
type Subject struct {
	Agent    string
	TaskType string // may contain dots; "" when the subject has none
}

// ParseSubject reads subject by the grammar; ok is false when it does not
// follow it (the prefix is not c's, or the "tasks" token is missing).
func (c Conventions) ParseSubject(subject string) (s Subject, ok bool) {
	t := strings.Split(subject, ".")
	if len(t) < 3 || t[0] != DefaultAgentSubjectPrefix || t[1] == "" || t[2] != "tasks" {
		return Subject{}, false
	}
	return Subject{Agent: t[1], TaskType: strings.Join(t[3:], ".")}, true
}

// TaskSubject builds the subject of a task of taskType for agent.
func (c Conventions) TaskSubject(agent, taskType string) string {
	return DefaultAgentSubjectPrefix + "." + agent + ".tasks." + taskType
}

// Tenant returns the tenant of a message with decoded headers h.
func (c Conventions) Tenant(h map[string][]string) string {
	t := strings.TrimSpace(Header(h, HeaderTenant))
	return cmp.Or(t, DefaultTenant)
}

// Agent returns the agent of a message: the agent header, else the <agent>
// token of a subject "agents.<agent>.tasks.<type>", else "".
func (c Conventions) Agent(subject string, h map[string][]string) string {
	if a := strings.TrimSpace(Header(h, HeaderAgent)); a != "" {
		return a
	}
	s, _ := c.ParseSubject(subject)
	return s.Agent
}

// Reassign makes h name agent wherever it names one, for a task rerouted to
// agent: the agent header is replaced in whatever case it was written; a
// message that named its agent only by its subject gets no header (its new
// subject names the agent).
func (c Conventions) Reassign(h map[string][]string, agent string) {
	for k := range h {
		if strings.EqualFold(k, HeaderAgent) {
			h[k] = []string{agent}
		}
	}
}

// TaskType returns the task type of a message: the X-Task-Type header, else
// the <type> of its subject, else "".
func (c Conventions) TaskType(subject string, h map[string][]string) string {
	if t := strings.TrimSpace(Header(h, HeaderTaskType)); t != "" {
		return t
	}
	s, _ := c.ParseSubject(subject)
	return s.TaskType
}

// IdempotencyKey returns the key that makes a task's effects happen once: the
// X-Idempotency-Key header, else "<task id>-<version>" when the message
// carries X-Task-Version, else the task id, else "" (no key: the task cannot
// be recognised as done, see docs/replay.md).
func (c Conventions) IdempotencyKey(h map[string][]string) string {
	if k := strings.TrimSpace(Header(h, HeaderIdempotencyKey)); k != "" {
		return k
	}
	id := strings.TrimSpace(Header(h, HeaderTaskID))
	if id == "" {
		return ""
	}
	if v := strings.TrimSpace(Header(h, HeaderTaskVersion)); v != "" {
		return id + "-" + v
	}
	return id
}

// IsIdentityHeader reports whether name (any case) is a header the task's
// identity is read from: its tenant, its idempotency key, and the
// task id and version the key falls back to. A replay's edits may not set
// them: the gates (the tenant's breaker, the task's completion record)
// judged the identity stored with the entry, and the replay must carry that
// one to the agent.
func (c Conventions) IsIdentityHeader(name string) bool {
	for _, id := range []string{HeaderTenant, HeaderIdempotencyKey, HeaderTaskID, HeaderTaskVersion} {
		if strings.EqualFold(name, id) {
			return true
		}
	}
	return false
}

// Replay is what a replay's Jsdlq-* headers tell the agent.
type Replay struct {
	Of               string // the entry this message replays
	Attempt          int
	Strategy         string
	Instructions     []string
	TargetModel      string
	MaxContextTokens int
	MaxOutputTokens  int
	CompletedSteps   []string
}

// IsReplay reports whether the headers named a replayed entry.
func (r Replay) IsReplay() bool { return r.Of != "" }

// Set writes r's headers into h, replacing any Jsdlq-* header already there.
// Header values cannot hold line breaks: each instruction and step is put on
// one line.
func (r Replay) Set(h map[string][]string) {
	for name := range h {
		if IsReplayHeader(name) {
			delete(h, name)
		}
	}
	set := func(name, v string) {
		if v != "" {
			h[name] = []string{v}
		}
	}
	set(HeaderReplayOf, r.Of)
	if r.Attempt > 0 {
		set(HeaderReplayAttempt, strconv.Itoa(r.Attempt))
	}
	set(HeaderStrategy, r.Strategy)
	for _, in := range r.Instructions {
		h[HeaderInstruction] = append(h[HeaderInstruction], oneLine(in))
	}
	set(HeaderTargetModel, r.TargetModel)
	if r.MaxContextTokens > 0 {
		set(HeaderMaxContextTokens, strconv.Itoa(r.MaxContextTokens))
	}
	if r.MaxOutputTokens > 0 {
		set(HeaderMaxOutputTokens, strconv.Itoa(r.MaxOutputTokens))
	}
	for _, s := range r.CompletedSteps {
		h[HeaderCompletedSteps] = append(h[HeaderCompletedSteps], oneLine(s))
	}
}

// ParseReplay reads the Jsdlq-* headers of a message (names in any case).
// Malformed numbers read as 0: a replay is still processed, without the
// limit it could not read.
func ParseReplay(h map[string][]string) Replay {
	var r Replay
	for name, vs := range h {
		if len(vs) == 0 || !IsReplayHeader(name) {
			continue
		}
		first := strings.TrimSpace(vs[0])
		switch {
		case strings.EqualFold(name, HeaderReplayOf):
			r.Of = first
		case strings.EqualFold(name, HeaderReplayAttempt):
			r.Attempt = positive(first)
		case strings.EqualFold(name, HeaderStrategy):
			r.Strategy = first
		case strings.EqualFold(name, HeaderInstruction):
			r.Instructions = append(r.Instructions, vs...)
		case strings.EqualFold(name, HeaderTargetModel):
			r.TargetModel = first
		case strings.EqualFold(name, HeaderMaxContextTokens):
			r.MaxContextTokens = positive(first)
		case strings.EqualFold(name, HeaderMaxOutputTokens):
			r.MaxOutputTokens = positive(first)
		case strings.EqualFold(name, HeaderCompletedSteps):
			r.CompletedSteps = append(r.CompletedSteps, vs...)
		}
	}
	return r
}

// IsReplayHeader reports whether name is one of jsdlq's Jsdlq-* headers
// (any case): only jsdlq sets them, so a publisher's own are dropped.
func IsReplayHeader(name string) bool { return hasPrefixFold(name, ReplayPrefix) }

// IsControlHeader reports whether a header of a stored message must not be
// copied onto a replay: JetStream's own (Nats-*) and an earlier replay's.
func IsControlHeader(name string) bool {
	return hasPrefixFold(name, "Nats-") || IsReplayHeader(name)
}

// CopyForReplay returns the headers of a stored message a replay carries:
// all but the control headers, values copied.
func CopyForReplay(h map[string][]string) map[string][]string {
	out := make(map[string][]string, len(h)+4)
	for name, values := range h {
		if !IsControlHeader(name) {
			out[name] = slices.Clone(values)
		}
	}
	return out
}

func positive(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\r' || r == '\n' }), " ")
}
