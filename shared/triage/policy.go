// Package triage is the policy engine (docs/policy.md): it finds why a task
// died (reason code), what kind of failure that is (category) and what to do
// about it (action and retry strategy with its modifications). The policy is
// YAML data: an embedded default, overridable from Firestore without a
// redeploy.
package triage

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/textproto"
	"regexp"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/jsdlq/jsdlq/shared/event"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the embedded default policy document.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// ErrInvalid wraps every policy validation error.
var ErrInvalid = errors.New("triage: invalid policy")

// Category is the kind of failure; the policy's reasons map each reason code
// to one (docs/policy.md).
type Category string

// Categories. Unknown is for reason codes the policy does not know; the
// default strategy applies to it.
const (
	Transient                Category = "transient"
	ConditionallyRecoverable Category = "conditionally_recoverable"
	Permanent                Category = "permanent"
	Poison                   Category = "poison"
	Governance               Category = "governance"
	UnknownCommitState       Category = "unknown_commit_state"
	Unknown                  Category = "unknown"
)

// Categories lists every valid category.
var Categories = []Category{Transient, ConditionallyRecoverable, Permanent, Poison, Governance, UnknownCommitState, Unknown}

// Action is what happens to a dead task.
type Action string

// Actions.
const (
	AutoReplay      Action = "auto_replay"
	Escalate        Action = "escalate"
	Quarantine      Action = "quarantine"
	RequireApproval Action = "require_approval"
	ManualReview    Action = "manual_review"
	Discard         Action = "discard"
)

// Actions lists every valid action.
var Actions = []Action{AutoReplay, Escalate, Quarantine, RequireApproval, ManualReview, Discard}

// ReasonUnknown is the code of a failure nothing explains.
const ReasonUnknown = event.ReasonUnknown

// serverTerminated reports whether code is of a message the server
// terminated itself (event.ServerTermReasons): such a message is never
// replayed automatically whatever a policy says, because the server removed
// it for a reason (limits) the replay would hit again.
func serverTerminated(code string) bool {
	_, ok := event.ServerTermReasons[code]
	return ok
}

// document is the YAML shape of a policy.
type document struct {
	Defaults     defaults            `yaml:"defaults"`
	Reasons      map[string]Category `yaml:"reasons"`
	Patterns     []patternDoc        `yaml:"patterns"`
	Capabilities capabilities        `yaml:"capabilities"`
	Strategies   map[string]Strategy `yaml:"strategies"`
	Rules        []ruleDoc           `yaml:"rules"`
	Predictions  *predictionsDoc     `yaml:"predictions,omitempty"`
	// Alerts and AlertsByAgent are reconcile's alert thresholds (alerts.go).
	Alerts        *alertsDoc               `yaml:"alerts,omitempty"`
	AlertsByAgent map[string]agentAlertDoc `yaml:"alerts_by_agent,omitempty"`
}

type defaults struct {
	EscalationTarget   string  `yaml:"escalation_target"`
	Jitter             float64 `yaml:"jitter"`
	ToolFailurePattern string  `yaml:"tool_failure_pattern,omitempty"`
	SubjectAgentToken  int     `yaml:"subject_agent_token,omitempty"`
	TokenBudgetHeader  string  `yaml:"token_budget_header,omitempty"`
	DefaultTokenBudget int     `yaml:"default_token_budget,omitempty"`
	// RetryableStrategy replays a permanent failure the agent marked
	// retryable (agentkit Failure.Retryable = true), within its budget;
	// empty ignores the mark.
	RetryableStrategy string `yaml:"retryable_strategy,omitempty"`
	// Retention is how long an entry is kept ("30d", "12h", "1d12h");
	// a rule's own retention wins over the agent's, which wins over the
	// tenant's, which wins over this one. Empty is DefaultRetention.
	Retention         string            `yaml:"retention,omitempty"`
	RetentionByAgent  map[string]string `yaml:"retention_by_agent,omitempty"`
	RetentionByTenant map[string]string `yaml:"retention_by_tenant,omitempty"`
	// RequireIdempotencyKey: a keyless task waits for a human instead of
	// replaying on its own (keyless.go); unset is true.
	RequireIdempotencyKey *bool `yaml:"require_idempotency_key,omitempty"`
}

type patternDoc struct {
	Code string `yaml:"code"`
	Text string `yaml:"text"`
}

type capabilities struct {
	Agents   map[string][]string `yaml:"agents"`
	Fallback string              `yaml:"fallback"`
}

// Delay is min(Base * Factor^attempt, Max); Factor 0 or 1 means constant.
type Delay struct {
	Base   Duration `yaml:"base"`
	Factor float64  `yaml:"factor,omitempty"`
	Max    Duration `yaml:"max,omitempty"`
	Jitter *float64 `yaml:"jitter,omitempty"` // overrides defaults.jitter
}

// Duration is a time.Duration written as "30s" in YAML.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (for example 30s)", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Strategy is how a replay is made.
type Strategy struct {
	Name              string   `yaml:"name,omitempty"`
	Delay             Delay    `yaml:"delay,omitempty"`
	MaxReplays        int      `yaml:"max_replays"`
	MaxContextTokens  int      `yaml:"max_context_tokens,omitempty"`
	OutputTokenFactor float64  `yaml:"output_token_factor,omitempty"`
	TargetModel       string   `yaml:"target_model,omitempty"`
	AlternateAgent    bool     `yaml:"alternate_agent,omitempty"`
	Instructions      []string `yaml:"instructions,omitempty"`
}

// strategyRef is a rule's strategy: a name of policy.strategies or an inline
// strategy.
type strategyRef struct {
	Ref    string
	Inline *Strategy
}

func (s *strategyRef) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&s.Ref)
	}
	s.Inline = &Strategy{}
	return n.Decode(s.Inline)
}

func (s strategyRef) MarshalYAML() (any, error) {
	if s.Inline != nil {
		return s.Inline, nil
	}
	return s.Ref, nil
}

type matchDoc struct {
	ReasonCode           []string          `yaml:"reason_code,omitempty"`
	Category             []Category        `yaml:"category,omitempty"`
	Kind                 []string          `yaml:"kind,omitempty"`
	Stream               []string          `yaml:"stream,omitempty"`
	Subject              []string          `yaml:"subject,omitempty"`
	Tenant               []string          `yaml:"tenant,omitempty"`
	Agent                []string          `yaml:"agent,omitempty"`
	TaskType             []string          `yaml:"task_type,omitempty"`
	Headers              map[string]string `yaml:"headers,omitempty"`
	ReasonText           string            `yaml:"reason_text,omitempty"`
	ChainFailuresAtLeast int               `yaml:"chain_failures_at_least,omitempty"`
	SeenInChain          []string          `yaml:"seen_in_chain,omitempty"`
	CompletedSteps       *bool             `yaml:"completed_steps,omitempty"`
	ToolFailure          *bool             `yaml:"tool_failure,omitempty"`
}

type ruleDoc struct {
	Name        string      `yaml:"name"`
	Match       matchDoc    `yaml:"match"`
	SetCategory Category    `yaml:"set_category,omitempty"`
	Action      Action      `yaml:"action"`
	Strategy    strategyRef `yaml:"strategy"`
	EscalateTo  string      `yaml:"escalate_to,omitempty"`
	Retention   string      `yaml:"retention,omitempty"`
	// Predictions "off" switches predictions off for the tasks the rule
	// matches; a rule with it and no action only does that.
	Predictions Switch `yaml:"predictions,omitempty"`
	// Approvers may approve the rule's entries (approvers.go).
	Approvers approverList `yaml:"approvers,omitempty"`
	// RequireIdempotencyKey overrides defaults.require_idempotency_key
	// for the rule's entries (keyless.go).
	RequireIdempotencyKey *bool `yaml:"require_idempotency_key,omitempty"`
	// FeedPayload puts the payload of the rule's entries into the change
	// feed's rows (inline payloads; no payload leaves by default).
	FeedPayload bool `yaml:"feed_payload,omitempty"`
}

// Policy is a validated, compiled policy. It is immutable and safe for
// concurrent use.
type Policy struct {
	version   string
	canonical []byte
	doc       document
	patterns  []compiledPattern
	rules     []rule
	toolRE    *regexp.Regexp
	retryable Strategy            // defaults.retryable_strategy; Name "" when unset
	overlaid  *Overlaid           // what an override changed (overlay.go); nil when parsed alone
	byTask    map[string][]string // task type -> agents able to do it, sorted
	retention retention
	predict   predictions
	// agentAlerts are the alerts: and alerts_by_agent: thresholds.
	agentAlerts agentAlerts
	rand        func() float64
}

type compiledPattern struct {
	code string
	re   *regexp.Regexp
}

type rule struct {
	index    int
	doc      ruleDoc
	strategy Strategy
	headers  map[string]*regexp.Regexp
	text     *regexp.Regexp
	// retention is the rule's own retention; 0 leaves it to the defaults.
	retention time.Duration
	// switchOnly: the rule only switches predictions off; Evaluate skips it.
	switchOnly bool
}

// Option configures Parse and NewLoader.
type Option func(*options)

type options struct{ rand func() float64 }

// WithRand sets the source of jitter: a function returning [0, 1). The
// default is math/rand/v2, which is safe for concurrent use.
func WithRand(f func() float64) Option { return func(o *options) { o.rand = f } }

// Default returns the embedded default policy.
func Default(opts ...Option) *Policy {
	p, err := Parse(defaultYAML, opts...)
	if err != nil {
		// The default is tested; a broken one must not ship.
		panic(err)
	}
	return p
}

// Version is the policy's content hash: the first 12 hex digits of the
// SHA-256 of its canonical YAML, so formatting and comments do not change it.
func (p *Policy) Version() string { return p.version }

// Canonical returns the canonical YAML the version hashes.
func (p *Policy) Canonical() []byte { return bytes.Clone(p.canonical) }

// EscalationTarget is where escalations go by default.
func (p *Policy) EscalationTarget() string { return p.doc.Defaults.EscalationTarget }

// Category returns the category the policy gives a reason code.
func (p *Policy) Category(code string) Category {
	if c, ok := p.doc.Reasons[code]; ok {
		return c
	}
	return Unknown
}

// Parse reads, validates and compiles a policy document. Every problem is
// reported, each naming where it is ("rule 3 (name llm-timeouts):
// strategy.delay.base: ..."), wrapped in ErrInvalid.
func Parse(data []byte, opts ...Option) (*Policy, error) {
	o := options{rand: rand.Float64}
	for _, opt := range opts {
		opt(&o)
	}
	var doc document
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: yaml: %w", ErrInvalid, err)
	}
	p := &Policy{doc: doc, rand: o.rand}
	v := &validator{}
	p.compile(v)
	if err := v.err(); err != nil {
		return nil, err
	}
	canon, err := yaml.Marshal(&p.doc)
	if err != nil {
		return nil, fmt.Errorf("triage: canonical yaml: %w", err)
	}
	sum := sha256.Sum256(canon)
	p.canonical = canon
	p.version = hex.EncodeToString(sum[:])[:12]
	return p, nil
}

type validator struct{ errs []error }

func (v *validator) add(where, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: "+format, append([]any{where}, args...)...))
}

func (v *validator) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", ErrInvalid, errors.Join(v.errs...))
}

var codeRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

func validCategory(c Category) bool {
	for _, x := range Categories {
		if x == c {
			return true
		}
	}
	return false
}

func validAction(a Action) bool {
	for _, x := range Actions {
		if x == a {
			return true
		}
	}
	return false
}

func (p *Policy) compile(v *validator) {
	d := &p.doc
	if d.Defaults.EscalationTarget == "" {
		v.add("defaults.escalation_target", "required")
	}
	if d.Defaults.Jitter < 0 || d.Defaults.Jitter >= 1 {
		v.add("defaults.jitter", "%v is not in [0, 1)")
	}
	if d.Defaults.SubjectAgentToken < 0 {
		v.add("defaults.subject_agent_token", "must not be negative")
	}
	if d.Defaults.DefaultTokenBudget < 0 {
		v.add("defaults.default_token_budget", "must not be negative")
	}
	if name := d.Defaults.RetryableStrategy; name != "" {
		s, ok := d.Strategies[name]
		switch {
		case !ok:
			v.add("defaults.retryable_strategy", "%q is not defined in strategies", name)
		case s.MaxReplays < 1:
			v.add("defaults.retryable_strategy", "strategy %q allows no replay", name)
		}
		s.Name = name
		p.retryable = s
	}
	p.retention = compileRetention(v, d.Defaults)
	if d.Defaults.ToolFailurePattern != "" {
		re, err := regexp.Compile(d.Defaults.ToolFailurePattern)
		if err != nil {
			v.add("defaults.tool_failure_pattern", "%v", err)
		}
		p.toolRE = re
	}
	if len(d.Reasons) == 0 {
		v.add("reasons", "at least one reason code is required")
	}
	for _, code := range slices.Sorted(maps.Keys(d.Reasons)) {
		if !codeRE.MatchString(code) {
			v.add("reasons."+code, "reason codes are lower-case letters, digits and _")
		}
		if !validCategory(d.Reasons[code]) {
			v.add("reasons."+code, "unknown category %q", d.Reasons[code])
		}
	}
	if _, ok := d.Reasons[ReasonUnknown]; !ok {
		v.add("reasons", "the code %q must be present", ReasonUnknown)
	}
	// The server's own TERM reasons are facts, not policy: tried first,
	// whatever the document's patterns say.
	for _, code := range slices.Sorted(maps.Keys(event.ServerTermReasons)) {
		re := regexp.MustCompile("(?i)^" + regexp.QuoteMeta(event.ServerTermReasons[code]))
		p.patterns = append(p.patterns, compiledPattern{code: code, re: re})
	}
	for i, pd := range d.Patterns {
		where := fmt.Sprintf("pattern %d", i+1)
		if _, ok := d.Reasons[pd.Code]; !ok {
			v.add(where, "code %q is not in reasons", pd.Code)
		}
		re, err := regexp.Compile(pd.Text)
		if err != nil || pd.Text == "" {
			v.add(where+": text", "not a regular expression: %v", err)
			continue
		}
		p.patterns = append(p.patterns, compiledPattern{code: pd.Code, re: re})
	}
	p.byTask = map[string][]string{}
	for _, agent := range slices.Sorted(maps.Keys(d.Capabilities.Agents)) {
		for _, task := range d.Capabilities.Agents[agent] {
			p.byTask[task] = append(p.byTask[task], agent)
		}
	}
	if d.Capabilities.Fallback == "" {
		v.add("capabilities.fallback", "required")
	}
	for _, name := range slices.Sorted(maps.Keys(d.Strategies)) {
		s := d.Strategies[name]
		validateStrategy(v, "strategy "+name, s)
		s.Name = name
		d.Strategies[name] = s
	}
	p.predict = compilePredictions(v, d)
	p.agentAlerts = compileAgentAlerts(v, d)
	if len(d.Rules) == 0 {
		v.add("rules", "at least one rule is required")
	}
	names := map[string]int{}
	for i, rd := range d.Rules {
		where := fmt.Sprintf("rule %d (name %s)", i+1, rd.Name)
		if rd.Name == "" {
			v.add(where, "name is required")
		} else if j, dup := names[rd.Name]; dup {
			v.add(where, "name already used by rule %d", j)
		}
		names[rd.Name] = i + 1
		r := rule{index: i + 1, doc: rd}
		if rd.Predictions.Off() {
			checkPredictionSwitch(v, where, rd)
			r.switchOnly = rd.Action == ""
		}
		if !r.switchOnly {
			r.retention, r.strategy = p.compileAction(v, where, rd)
		}
		checkApprovers(v, where, rd)
		checkKeyless(v, where, rd, r.switchOnly)
		m := rd.Match
		for _, code := range append(append([]string{}, m.ReasonCode...), m.SeenInChain...) {
			if _, ok := d.Reasons[code]; !ok {
				v.add(where+": match", "reason code %q is not in reasons", code)
			}
		}
		for _, c := range m.Category {
			if !validCategory(c) {
				v.add(where+": match.category", "unknown category %q", c)
			}
		}
		for _, s := range m.Subject {
			if !validSubjectPattern(s) {
				v.add(where+": match.subject", "%q is not a NATS subject pattern", s)
			}
		}
		if m.ChainFailuresAtLeast < 0 {
			v.add(where+": match.chain_failures_at_least", "must not be negative")
		}
		if len(m.Headers) > 0 {
			r.headers = map[string]*regexp.Regexp{}
			for _, h := range slices.Sorted(maps.Keys(m.Headers)) {
				re, err := regexp.Compile(m.Headers[h])
				if err != nil {
					v.add(where+": match.headers."+h, "%v", err)
					continue
				}
				r.headers[textproto.CanonicalMIMEHeaderKey(h)] = re
			}
		}
		if m.ReasonText != "" {
			re, err := regexp.Compile(m.ReasonText)
			if err != nil {
				v.add(where+": match.reason_text", "%v", err)
			}
			r.text = re
		}
		if rd.Action == AutoReplay {
			for _, code := range m.ReasonCode {
				if serverTerminated(code) {
					v.add(where+": action", "server-terminated messages (%s) are never replayed automatically", code)
				}
			}
		}
		p.rules = append(p.rules, r)
	}
}

// compileAction validates what a rule does (action, category, strategy,
// retention) and returns its retention and strategy.
func (p *Policy) compileAction(v *validator, where string, rd ruleDoc) (retention time.Duration, strategy Strategy) {
	d := &p.doc
	if rd.Retention != "" {
		retention = checkRetention(v, where+": retention", rd.Retention)
	}
	if !validAction(rd.Action) {
		v.add(where+": action", "%q is not one of %v", rd.Action, Actions)
	}
	if rd.SetCategory != "" && !validCategory(rd.SetCategory) {
		v.add(where+": set_category", "unknown category %q", rd.SetCategory)
	}
	switch {
	case rd.Strategy.Inline != nil:
		validateStrategy(v, where+": strategy", *rd.Strategy.Inline)
		strategy = *rd.Strategy.Inline
		if strategy.Name == "" {
			strategy.Name = rd.Name
		}
	case rd.Strategy.Ref == "":
		v.add(where+": strategy", "required (a name from strategies or an inline strategy)")
	default:
		s, ok := d.Strategies[rd.Strategy.Ref]
		if !ok {
			v.add(where+": strategy", "%q is not defined in strategies", rd.Strategy.Ref)
		}
		s.Name = rd.Strategy.Ref
		strategy = s
	}
	if rd.Action == AutoReplay && strategy.MaxReplays < 1 && (rd.Strategy.Inline != nil || rd.Strategy.Ref != "") {
		v.add(where+": strategy.max_replays", "auto_replay needs at least 1 replay")
	}
	return retention, strategy
}

func validateStrategy(v *validator, where string, s Strategy) {
	if s.MaxReplays < 0 || s.MaxReplays > 100 {
		v.add(where+".max_replays", "%d is not in [0, 100]", s.MaxReplays)
	}
	if s.MaxReplays > 0 {
		if s.Delay.Base <= 0 {
			v.add(where+".delay.base", "must be positive when replays are allowed")
		}
	}
	if s.Delay.Factor < 0 || s.Delay.Factor > 10 {
		v.add(where+".delay.factor", "%v is not in [0, 10]", s.Delay.Factor)
	}
	if s.Delay.Max < 0 || (s.Delay.Max > 0 && s.Delay.Max < s.Delay.Base) {
		v.add(where+".delay.max", "must be at least delay.base")
	}
	const maxAhead = Duration(30 * 24 * time.Hour)
	if s.Delay.Base > maxAhead || s.Delay.Max > maxAhead {
		v.add(where+".delay", "Cloud Tasks schedules at most 30 days ahead")
	}
	if s.Delay.Jitter != nil && (*s.Delay.Jitter < 0 || *s.Delay.Jitter >= 1) {
		v.add(where+".delay.jitter", "%v is not in [0, 1)", *s.Delay.Jitter)
	}
	if s.OutputTokenFactor < 0 || s.OutputTokenFactor > 1 {
		v.add(where+".output_token_factor", "%v is not in [0, 1]", s.OutputTokenFactor)
	}
	if s.MaxContextTokens < 0 {
		v.add(where+".max_context_tokens", "must not be negative")
	}
}
