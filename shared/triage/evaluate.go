package triage

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
)

// Input is what the engine knows about one dead task. store.Entry.PolicyInput
// builds it, the one mapping classify, replay and dlqctl share.
type Input struct {
	Kind       string // max_deliver | terminated | explicit
	Stream     string
	Subject    string
	Tenant     string
	Agent      string
	TaskType   string
	Headers    map[string][]string
	TermReason string         // the advisory's reason, as the server sent it
	Failure    *event.Failure // the agentkit record, if any
	Deliveries int
	// IdempotencyKey is the key the task's completion is recorded under
	// (event.Conventions.IdempotencyKey); "" for a keyless task, which
	// the policy may keep from replaying on its own (keyless.go).
	IdempotencyKey string
}

// Chain is what earlier entries of the same replay chain tell: the entry
// being classified is a replay of a replay of ... the root.
type Chain struct {
	// Codes are the reason codes of the earlier failures, root first.
	Codes []string
	// Strategies are the strategies earlier failures were replayed with,
	// root first ("" where none was).
	Strategies []string
}

// Failures is how many failures the chain had before this one.
func (c Chain) Failures() int { return len(c.Codes) }

// Detection routes, in the order they are tried (docs/policy.md, "Detecting
// the reason code").
const (
	RouteRecord     = "record"      // the agentkit failure record
	RouteTermCode   = "term_code"   // TERM reason is a bare code
	RouteTermDetail = "term_detail" // TERM reason is "code: detail"
	RouteTermJSON   = "term_json"   // TERM reason is {"code","detail"}
	RoutePattern    = "pattern"     // a text pattern over reason and detail
	RouteNone       = "none"        // nothing explains it: unknown
)

// Modifications are what a replay changes about the task, carried in the
// replay's Jsdlq-* headers (docs/contracts.md, "Message headers").
type Modifications struct {
	Instructions     []string `json:"instructions,omitempty" firestore:"instructions,omitempty"`
	TargetModel      string   `json:"target_model,omitempty" firestore:"target_model,omitempty"`
	MaxContextTokens int      `json:"max_context_tokens,omitempty" firestore:"max_context_tokens,omitempty"`
	MaxOutputTokens  int      `json:"max_output_tokens,omitempty" firestore:"max_output_tokens,omitempty"`
	AlternateAgent   string   `json:"alternate_agent,omitempty" firestore:"alternate_agent,omitempty"`
	AlternateSubject string   `json:"alternate_subject,omitempty" firestore:"alternate_subject,omitempty"`
}

// Replay is what a task run under m is told in its Jsdlq-* headers
// (event.Replay.Set writes them): the one mapping from a strategy's changes
// to headers, for a replay of entry of (replay's plan, store.Plan) and for
// a task changed before its first attempt (of "", attempt 0: Predicted).
// completed are the steps the failed attempt already made.
func (m Modifications) Replay(of string, attempt int, strategy string, completed []string) event.Replay {
	return event.Replay{Of: of, Attempt: attempt, Strategy: strategy, Instructions: m.Instructions,
		TargetModel: m.TargetModel, MaxContextTokens: m.MaxContextTokens, MaxOutputTokens: m.MaxOutputTokens,
		CompletedSteps: completed}
}

// Decision is the outcome of Evaluate.
type Decision struct {
	Category   Category
	ReasonCode string
	Route      string // how the reason code was found
	Detail     string // the failure detail or reason text
	Rule       string // the name of the rule that matched
	Action     Action
	Strategy   string
	// Delay is the wait before the replay (auto_replay only).
	Delay time.Duration
	// Attempt is the number of replays this strategy already had in the
	// chain; the delay grows with it.
	Attempt int
	// ReplayBudget is how many replays the strategy still allows, counting
	// the one being decided; 0 when no replay is made.
	ReplayBudget  int
	Modifications Modifications
	EscalateTo    string
	PolicyVersion string
	// Note explains an override of the rule's action (exhausted budget,
	// server-terminated message).
	Note string
	// Retention is how long the entry is kept from its creation: the
	// rule's, the agent's, the tenant's or the policy's default retention.
	Retention time.Duration
	// FeedPayload: the rule puts the payload into the change feed's rows.
	FeedPayload bool
}

// Replay reports whether the decision schedules a replay.
func (d Decision) Replay() bool { return d.Action == AutoReplay }

// DelayRange is the shortest and longest delay Evaluate can give in and
// chain: the decision at both ends of the jitter (0 when it replays
// nothing). What `policy test` shows, so an operator sees the whole range,
// not one draw.
func (p *Policy) DelayRange(in Input, chain Chain) (lo, hi time.Duration) {
	at := func(r float64) time.Duration {
		q := *p // compiled parts are read-only; only the jitter differs
		q.rand = func() float64 { return r }
		return q.Evaluate(in, chain).Delay
	}
	a, b := at(0), at(0.999999)
	return min(a, b), max(a, b)
}

// Evaluate decides what to do with a dead task. It is pure apart from the
// jitter source, and never fails: what it cannot explain is `unknown`.
func (p *Policy) Evaluate(in Input, chain Chain) Decision {
	d := Decision{PolicyVersion: p.version, EscalateTo: p.doc.Defaults.EscalationTarget}
	d.ReasonCode, d.Route, d.Detail = p.detect(in)
	d.Category = p.Category(d.ReasonCode)
	r := p.match(in, chain, d)
	d.Rule = r.doc.Name
	d.Action = r.doc.Action
	d.Retention = p.retentionFor(r, in)
	d.FeedPayload = r.doc.FeedPayload
	if r.doc.SetCategory != "" {
		d.Category = r.doc.SetCategory
	}
	if r.doc.EscalateTo != "" {
		d.EscalateTo = r.doc.EscalateTo
	}
	s := r.strategy
	d.Strategy = s.Name
	if serverTerminated(d.ReasonCode) && d.Action == AutoReplay {
		// A policy override must not make the server's own deletions replay.
		d.Action = Escalate
		d.Note = "server-terminated messages are never replayed automatically"
	}
	if f := in.Failure; f != nil && f.Retryable != nil {
		s = p.agentRetryable(&d, *f.Retryable, s)
	}
	if d.Action != AutoReplay {
		return d
	}
	for _, used := range chain.Strategies {
		if used == s.Name {
			d.Attempt++
		}
	}
	d.ReplayBudget = s.MaxReplays - d.Attempt
	if d.ReplayBudget <= 0 {
		d.ReplayBudget = 0
		d.Action = Escalate
		d.Note = fmt.Sprintf("replay budget of strategy %s exhausted (%d of %d)", s.Name, d.Attempt, s.MaxReplays)
		return d
	}
	d.Delay = p.delay(s, d.Attempt)
	d.Modifications = p.modifications(s, in, d)
	p.holdKeyless(&d, r, in)
	return d
}

// agentRetryable applies the agent's own view of its failure (agentkit's
// Failure.Retryable) over the rule's: false stops a replay the rule would
// make; true lets a permanent failure be replayed with the policy's
// retryable strategy, within that strategy's budget. It never makes poison,
// governance, uncertain side effects or the server's own deletions replay:
// there the agent cannot know better than the policy.
func (p *Policy) agentRetryable(d *Decision, retryable bool, s Strategy) Strategy {
	switch {
	case !retryable && d.Action == AutoReplay:
		d.Action = Escalate
		d.Note = "the agent marked the failure not retryable"
	case retryable && d.Action == Escalate && d.Category == Permanent && d.Note == "" && p.retryable.Name != "":
		if serverTerminated(d.ReasonCode) {
			return s
		}
		d.Action = AutoReplay
		d.Strategy = p.retryable.Name
		d.Note = "the agent marked the permanent failure retryable"
		return p.retryable
	}
	return s
}

func (p *Policy) delay(s Strategy, attempt int) time.Duration {
	base := float64(s.Delay.Base)
	if s.Delay.Factor > 1 {
		base *= math.Pow(s.Delay.Factor, float64(attempt))
	}
	if s.Delay.Max > 0 && base > float64(s.Delay.Max) {
		base = float64(s.Delay.Max)
	}
	jitter := p.doc.Defaults.Jitter
	if s.Delay.Jitter != nil {
		jitter = *s.Delay.Jitter
	}
	// Jitter only shortens the delay, so the configured cap holds.
	return time.Duration(base * (1 - jitter*p.rand())).Round(time.Millisecond)
}

func (p *Policy) modifications(s Strategy, in Input, d Decision) Modifications {
	m := Modifications{TargetModel: s.TargetModel, MaxContextTokens: s.MaxContextTokens}
	for _, ins := range s.Instructions {
		if strings.Contains(ins, "{last_error}") {
			last := d.Detail
			if last == "" {
				last = d.ReasonCode
			}
			ins = strings.ReplaceAll(ins, "{last_error}", last)
		}
		m.Instructions = append(m.Instructions, ins)
	}
	if s.OutputTokenFactor > 0 {
		budget := p.doc.Defaults.DefaultTokenBudget
		if h := p.doc.Defaults.TokenBudgetHeader; h != "" {
			if v := headerValue(in.Headers, h); v != "" {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
					budget = n
				}
			}
		}
		m.MaxOutputTokens = int(math.Floor(s.OutputTokenFactor * float64(budget)))
	}
	if s.AlternateAgent {
		m.AlternateAgent = p.alternate(in.TaskType, in.Agent)
		m.AlternateSubject = p.reroute(in.Subject, in.Agent, m.AlternateAgent)
	}
	return m
}

// alternate picks another agent able to do the task type, in name order so
// the choice is reproducible, or the fallback.
func (p *Policy) alternate(taskType, current string) string {
	for _, a := range p.byTask[taskType] {
		if a != current {
			return a
		}
	}
	return p.doc.Capabilities.Fallback
}

// reroute replaces the agent token of the subject; it leaves subjects that do
// not carry the current agent where the policy says unchanged.
func (p *Policy) reroute(subject, from, to string) string {
	i := p.doc.Defaults.SubjectAgentToken
	toks := strings.Split(subject, ".")
	if i < 1 || i > len(toks) || from == "" || toks[i-1] != from || to == "" {
		return subject
	}
	toks[i-1] = to
	return strings.Join(toks, ".")
}

// detect finds the reason code: record, then TERM reason, then patterns.
func (p *Policy) detect(in Input) (code, route, detail string) {
	if f := in.Failure; f != nil && strings.TrimSpace(f.Code) != "" {
		return p.normalise(f.Code), RouteRecord, f.Detail
	}
	reason := strings.TrimSpace(in.TermReason)
	if reason != "" {
		if strings.HasPrefix(reason, "{") {
			var j struct {
				Code   string `json:"code"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal([]byte(reason), &j); err == nil && codeRE.MatchString(j.Code) {
				return p.normalise(j.Code), RouteTermJSON, j.Detail
			}
		}
		if codeRE.MatchString(reason) {
			return p.normalise(reason), RouteTermCode, ""
		}
		if c, rest, ok := strings.Cut(reason, ":"); ok && codeRE.MatchString(strings.TrimSpace(c)) {
			if _, known := p.doc.Reasons[strings.TrimSpace(c)]; known {
				return strings.TrimSpace(c), RouteTermDetail, strings.TrimSpace(rest)
			}
		}
	}
	var texts []string
	if reason != "" {
		texts = append(texts, reason)
	}
	if in.Failure != nil && in.Failure.Detail != "" {
		texts = append(texts, in.Failure.Detail)
	}
	for _, t := range texts {
		for _, pt := range p.patterns {
			if pt.re.MatchString(t) {
				return pt.code, RoutePattern, t
			}
		}
	}
	return ReasonUnknown, RouteNone, strings.Join(texts, "; ")
}

// normalise keeps codes the policy does not know (the taxonomy is
// extensible) but folds case and surrounding space.
// ReasonCodes are the reason codes the policy names, sorted: the
// vocabulary an operator's reason filter is checked against.
func (p *Policy) ReasonCodes() []string { return slices.Sorted(maps.Keys(p.doc.Reasons)) }

func (p *Policy) normalise(code string) string {
	return strings.ToLower(strings.TrimSpace(code))
}

func (p *Policy) toolFailure(in Input) bool {
	f := in.Failure
	if f == nil {
		return false
	}
	if f.ToolFailure {
		return true
	}
	return p.toolRE != nil && (p.toolRE.MatchString(f.Code) || p.toolRE.MatchString(f.Detail))
}

func (p *Policy) match(in Input, chain Chain, d Decision) rule {
	for _, r := range p.rules {
		if !r.switchOnly && p.matches(r, in, chain, d) {
			return r
		}
	}
	// Validation does not demand a catch-all rule; without one, the
	// default strategy (or none) applies.
	s, ok := p.doc.Strategies["default"]
	action := AutoReplay
	if !ok || s.MaxReplays < 1 {
		action = Escalate
	}
	s.Name = "default"
	return rule{doc: ruleDoc{Name: "(no rule matched)", Action: action}, strategy: s}
}

func (p *Policy) matches(r rule, in Input, chain Chain, d Decision) bool {
	m := r.doc.Match
	if !oneOf(m.ReasonCode, d.ReasonCode) || !oneOf(m.Category, d.Category) || !oneOf(m.Kind, in.Kind) ||
		!oneOf(m.Stream, in.Stream) || !oneOf(m.Tenant, in.Tenant) || !oneOf(m.Agent, in.Agent) || !oneOf(m.TaskType, in.TaskType) {
		return false
	}
	if len(m.Subject) > 0 && !slices.ContainsFunc(m.Subject, func(pat string) bool { return SubjectMatches(pat, in.Subject) }) {
		return false
	}
	for name, re := range r.headers {
		if !slices.ContainsFunc(headerValues(in.Headers, name), re.MatchString) {
			return false
		}
	}
	if r.text != nil {
		text := in.TermReason
		if in.Failure != nil {
			text += "\n" + in.Failure.Detail
		}
		if !r.text.MatchString(text) {
			return false
		}
	}
	if m.ChainFailuresAtLeast > 0 && chain.Failures()+1 < m.ChainFailuresAtLeast {
		return false
	}
	if len(m.SeenInChain) > 0 && !slices.ContainsFunc(chain.Codes, func(c string) bool { return slices.Contains(m.SeenInChain, c) }) {
		return false
	}
	if m.CompletedSteps != nil {
		has := in.Failure != nil && len(in.Failure.CompletedSteps) > 0
		if has != *m.CompletedSteps {
			return false
		}
	}
	if m.ToolFailure != nil && p.toolFailure(in) != *m.ToolFailure {
		return false
	}
	return true
}

// oneOf is how a rule's list condition matches: v is one of the listed
// values, or nothing is listed.
func oneOf[T comparable](listed []T, v T) bool {
	return len(listed) == 0 || slices.Contains(listed, v)
}

func headerValues(h map[string][]string, name string) []string {
	canon := textproto.CanonicalMIMEHeaderKey(name)
	for k, v := range h {
		if k == name || textproto.CanonicalMIMEHeaderKey(k) == canon {
			return v
		}
	}
	return nil
}

func headerValue(h map[string][]string, name string) string {
	if v := headerValues(h, name); len(v) > 0 {
		return v[0]
	}
	return ""
}
