package event

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file is the naming rule (docs/contracts.md, "Names"): the one
// constructor of each identifier a dead task carries from the wire (tenant,
// agent, task type, stream), and how a task whose names break the rule is
// still recorded. The encoders that write identifiers to each destination
// are in escape.go; document ids are the store's (store.EntryID).

// Limits of the naming rule.
const (
	// MaxNameBytes bounds a tenant, agent or task type: encoded into a
	// Firestore document id (three bytes per byte at worst) or a field
	// name, it stays far below Firestore's 1,500 bytes, and it fits a
	// Pub/Sub attribute (1,024 bytes).
	MaxNameBytes = 256
	// MaxStreamBytes is JetStream's limit on a stream name.
	MaxStreamBytes = 255
	// KeptNameBytes bounds the copy of a name that broke the rule kept on
	// its entry (InvalidName.Value): the message's headers keep all of it.
	KeptNameBytes = 1024
)

// ReservedTenant is the tenant of the dead tasks whose names break the
// rule: they are recorded under it, flagged, with the names they carried
// kept as data (InvalidName). The rule refuses names that begin with "(",
// so no message and no tenant key can name it.
const ReservedTenant = "(invalid)"

// reservedPrefix begins jsdlq's own names in places tenants are listed:
// ReservedTenant, the counters' "(none)" and a long list's "(others)".
const reservedPrefix = "("

// NoName is the key jsdlq's counters give a name an entry does not have
// (store.NoKey: the hourly metrics by agent count the entries that name
// no agent under it). No agent may be named so: its deaths would be
// counted, and spared the per-agent alert, with those.
const NoName = "(none)"

// ErrBadName wraps every refusal of the naming rule.
var ErrBadName = errors.New("event: name breaks the naming rule")

// Tenant is a tenant name that follows the naming rule; ParseTenant and
// ParseStoredTenant make it.
type Tenant struct{ name string }

// Agent is an agent name that follows the naming rule (ParseAgent).
type Agent struct{ name string }

// TaskType is a task type that follows the naming rule (ParseTaskType).
type TaskType struct{ name string }

// Stream is a JetStream stream name (ParseStream).
type Stream struct{ name string }

func (t Tenant) String() string   { return t.name }
func (a Agent) String() string    { return a.name }
func (t TaskType) String() string { return t.name }
func (s Stream) String() string   { return s.name }

// ParseTenant reads a tenant as a message, a tenant key or a tenant API
// path names it: 1 to MaxNameBytes bytes of visible UTF-8 (letters, marks,
// numbers, punctuation, symbols and the ASCII space; no control, format or
// bidirectional characters), no white space at either end, not ".", ".."
// or "/" (no URL path can carry them as one segment, see URLPath), and not
// beginning with "(" (jsdlq's own names, ReservedTenant).
func ParseTenant(s string) (Tenant, error) {
	if err := checkName("tenant", s); err != nil {
		return Tenant{}, err
	}
	if strings.HasPrefix(s, reservedPrefix) {
		return Tenant{}, fmt.Errorf("%w: tenant %s begins with %q, which marks jsdlq's own names", ErrBadName, quote(s), reservedPrefix)
	}
	return Tenant{s}, nil
}

// ParseStoredTenant reads a tenant an entry can be stored under, as an
// operator names it (a console path, a dlqctl flag): one ParseTenant
// accepts, or ReservedTenant.
func ParseStoredTenant(s string) (Tenant, error) {
	if s == ReservedTenant {
		return Tenant{s}, nil
	}
	return ParseTenant(s)
}

// ParseAgent reads an agent name: the rule of ParseTenant but for the
// reserved names, which an agent cannot be confused with, except NoName,
// the counters' key of the entries without an agent.
func ParseAgent(s string) (Agent, error) {
	if err := checkName("agent", s); err != nil {
		return Agent{}, err
	}
	if s == NoName {
		return Agent{}, fmt.Errorf("%w: agent %s is the name jsdlq's counters give the entries that name no agent", ErrBadName, quote(s))
	}
	return Agent{s}, nil
}

// ParseTaskType reads a task type (it may contain dots, like the subject
// it is often read from): the rule of ParseAgent.
func ParseTaskType(s string) (TaskType, error) {
	if err := checkName("task type", s); err != nil {
		return TaskType{}, err
	}
	return TaskType{s}, nil
}

// ParseStream reads a stream name as JetStream allows it: 1 to
// MaxStreamBytes bytes of UTF-8 without white space, '.', '*', '>', '/' or
// '\'. JetStream allows control and bidirectional characters in a stream
// name, so this rule does too: every output escapes them (escape.go).
func ParseStream(s string) (Stream, error) {
	switch {
	case s == "":
		return Stream{}, fmt.Errorf("%w: stream name is empty", ErrBadName)
	case len(s) > MaxStreamBytes:
		return Stream{}, fmt.Errorf("%w: stream name of %d bytes, more than %d", ErrBadName, len(s), MaxStreamBytes)
	case !utf8.ValidString(s):
		return Stream{}, fmt.Errorf("%w: stream name %s is not UTF-8", ErrBadName, quote(s))
	case strings.ContainsAny(s, " \t\r\n\f.*>/\\"):
		return Stream{}, fmt.Errorf("%w: stream name %s holds white space, '.', '*', '>', '/' or '\\'", ErrBadName, quote(s))
	}
	return Stream{s}, nil
}

// checkName is the naming rule shared by tenants, agents and task types.
func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrBadName, what)
	case !pathSegment(s):
		return fmt.Errorf("%w: %s %q cannot be a URL path segment", ErrBadName, what, s)
	}
	if err := CheckValue(what, s, MaxNameBytes); err != nil {
		return err
	}
	if strings.TrimSpace(s) != s {
		return fmt.Errorf("%w: %s %s begins or ends with white space", ErrBadName, what, quote(s))
	}
	return nil
}

// CheckValue checks a value from the wire that no identifier rule covers
// (a filter's category or reason code, a task id to look up): at most max
// bytes of visible UTF-8 (Visible). Such a value can be neither a control
// sequence on a page or a terminal nor a query Firestore cannot send.
func CheckValue(what, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%w: %s of %d bytes, more than %d", ErrBadName, what, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %s is not UTF-8", ErrBadName, what, quote(s))
	}
	for _, r := range s {
		if !Visible(r) {
			return fmt.Errorf("%w: %s %s holds the invisible or control character %U", ErrBadName, what, quote(s), r)
		}
	}
	return nil
}

// Visible reports whether r shows as itself on a terminal and a page: a
// letter, mark, number, punctuation, symbol or the ASCII space. Control
// characters (C0, DEL, C1), format characters (the bidirectional overrides
// and isolates, zero-width characters), line and paragraph separators,
// other spaces, private-use and unassigned code points are not.
func Visible(r rune) bool { return unicode.IsPrint(r) }

// quote is s for an error message: Go-quoted (every invisible byte
// escaped) and cut to 64 bytes, since the message may be shown anywhere.
func quote(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// Names are the tenant, agent and task type a dead task is recorded
// under, by the naming rule.
type Names struct {
	Tenant   string
	Agent    string // "" when the task names none, or one that broke the rule
	TaskType string // likewise
	// Invalid lists the names that broke the rule, as the task carried
	// them; with any, Tenant is ReservedTenant.
	Invalid []InvalidName
}

// InvalidName is a name a dead task carried that broke the naming rule,
// kept as data on its entry (store.Entry.InvalidNames) and shown escaped.
type InvalidName struct {
	// Field is "tenant", "agent" or "task_type".
	Field string `json:"field" firestore:"field"`
	// Value is the name as carried (EncodeHeader's form: not UTF-8, it is
	// base64), its first KeptNameBytes bytes; the message's headers keep
	// all of it.
	Value string `json:"value" firestore:"value"`
	// Size is the name's length in bytes.
	Size int `json:"size" firestore:"size"`
	// Problem says which part of the rule it broke.
	Problem string `json:"problem" firestore:"problem"`
}

// CheckNames applies the naming rule to the names read from a dead task
// (agent and task type may be empty: not named). A task is never refused
// for its names: one that breaks the rule is recorded under ReservedTenant,
// the agent or task type that broke it left empty, and what it carried
// listed in Invalid. So capture never depends on a name.
func CheckNames(tenant, agent, taskType string) Names {
	n := Names{Tenant: tenant, Agent: agent, TaskType: taskType}
	if _, err := ParseTenant(tenant); err != nil {
		n.Invalid = append(n.Invalid, invalidName("tenant", tenant, err))
	}
	if _, err := ParseAgent(agent); agent != "" && err != nil {
		n.Agent = ""
		n.Invalid = append(n.Invalid, invalidName("agent", agent, err))
	}
	if _, err := ParseTaskType(taskType); taskType != "" && err != nil {
		n.TaskType = ""
		n.Invalid = append(n.Invalid, invalidName("task_type", taskType, err))
	}
	if len(n.Invalid) > 0 {
		n.Tenant = ReservedTenant
	}
	return n
}

// Original is the kept part of the name as the task carried it (Value
// decoded): data, to show through an encoder (Terminal).
func (n InvalidName) Original() string {
	v, err := DecodeHeader(n.Value)
	if err != nil {
		return n.Value
	}
	return v
}

func invalidName(field, v string, err error) InvalidName {
	kept := v
	if len(kept) > KeptNameBytes {
		cut := KeptNameBytes
		for cut > 0 && !utf8.RuneStart(kept[cut]) {
			cut--
		}
		kept = kept[:cut]
	}
	return InvalidName{Field: field, Value: EncodeHeader(kept), Size: len(v), Problem: Problem(err)}
}

// Problem is what a refusal of the naming rule says, without the
// package's prefix: the part to show to whoever gave the name.
func Problem(err error) string {
	return strings.TrimPrefix(err.Error(), ErrBadName.Error()+": ")
}

// Names reads the names of a task from its subject and decoded headers by
// c, failureAgent standing in for an agent neither names (the agent its
// failure record names), and applies the naming rule (CheckNames).
func (c Conventions) Names(subject string, h map[string][]string, failureAgent string) Names {
	agent := c.Agent(subject, h)
	if agent == "" {
		agent = strings.TrimSpace(failureAgent)
	}
	return CheckNames(c.Tenant(h), agent, c.TaskType(subject, h))
}
