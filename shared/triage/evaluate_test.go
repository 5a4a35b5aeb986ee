package triage

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

// want is the part of a Decision a case checks; the delay is checked as a
// range because of jitter.
type want struct {
	Category Category
	Code     string
	Route    string
	Action   Action
	Strategy string
	MinDelay time.Duration
	MaxDelay time.Duration
	Budget   int
	Mods     Modifications
}

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

// between is the delay range of a nominal delay with the default jitter 0.2.
func between(n float64) (time.Duration, time.Duration) { return sec(n * 0.8), sec(n) }

func TestEvaluateReasonCodes(t *testing.T) {
	t30lo, t30hi := between(30)
	t10lo, t10hi := between(10)
	t60lo, t60hi := between(60)
	t120lo, t120hi := between(120)
	transient := func(code string) want {
		return want{Category: Transient, Code: code, Route: RouteRecord, Action: AutoReplay, Strategy: "transient", MinDelay: t30lo, MaxDelay: t30hi, Budget: 3}
	}
	noReplay := func(cat Category, code string, a Action, strategy string) want {
		return want{Category: cat, Code: code, Route: RouteRecord, Action: a, Strategy: strategy}
	}
	overflowMods := Modifications{
		Instructions:     []string{"Focus on the core task. Skip background context."},
		TargetModel:      "large-context",
		MaxContextTokens: 80000,
	}
	tests := []struct {
		code string
		in   Input
		want want
	}{
		{code: "llm_provider_timeout", want: transient("llm_provider_timeout")},
		{code: "llm_provider_rate_limit", want: transient("llm_provider_rate_limit")},
		{code: "network_transient", want: transient("network_transient")},
		{code: "github_api_rate_limit", want: transient("github_api_rate_limit")},
		{code: "gke_node_preemption", want: transient("gke_node_preemption")},
		{code: "timeout", want: transient("timeout")},
		{code: "dependency_unavailable", want: transient("dependency_unavailable")},
		{code: "no_workers", want: transient("no_workers")},
		{code: "store_lock_busy", want: transient("store_lock_busy")},
		{code: "max_scheduling_retries", want: want{Category: Transient, Code: "max_scheduling_retries", Route: RouteRecord, Action: AutoReplay, Strategy: "max_scheduling_retries", MinDelay: t30lo, MaxDelay: t30hi, Budget: 2}},
		{code: "context_window_overflow", want: want{Category: ConditionallyRecoverable, Code: "context_window_overflow", Route: RouteRecord, Action: AutoReplay, Strategy: "context_window_overflow", MinDelay: t10lo, MaxDelay: t10hi, Budget: 1, Mods: overflowMods}},
		{
			code: "hallucination_loop",
			in:   Input{Agent: "backend", TaskType: "code_review", Subject: "agents.backend.tasks.code_review"},
			want: want{Category: ConditionallyRecoverable, Code: "hallucination_loop", Route: RouteRecord, Action: AutoReplay, Strategy: "hallucination_loop", MinDelay: t60lo, MaxDelay: t60hi, Budget: 1, Mods: Modifications{
				Instructions: []string{
					"Previous attempts produced incorrect output: detail of hallucination_loop",
					"Validate your output against the schema before submitting.",
				},
				TargetModel:      "alternate",
				AlternateAgent:   "cto",
				AlternateSubject: "agents.cto.tasks.code_review",
			}},
		},
		{
			code: "token_budget_exceeded",
			in:   Input{Headers: map[string][]string{"x-token-budget": {"5000"}}},
			want: want{Category: ConditionallyRecoverable, Code: "token_budget_exceeded", Route: RouteRecord, Action: AutoReplay, Strategy: "token_budget_exceeded", MinDelay: t10lo, MaxDelay: t10hi, Budget: 1, Mods: Modifications{
				Instructions:    []string{"Produce a concise response. Prioritize accuracy over completeness."},
				MaxOutputTokens: 3000,
			}},
		},
		{code: "model_confusion", want: want{Category: ConditionallyRecoverable, Code: "model_confusion", Route: RouteRecord, Action: AutoReplay, Strategy: "model_confusion", MinDelay: t60lo, MaxDelay: t60hi, Budget: 1, Mods: Modifications{
			Instructions: []string{"Re-read the task statement and answer only what it asks."}, TargetModel: "alternate",
		}}},
		{code: "authority_exceeded", want: noReplay(Permanent, "authority_exceeded", Escalate, "none")},
		{code: "impossible_task", want: noReplay(Permanent, "impossible_task", Escalate, "none")},
		{code: "dependency_removed", want: noReplay(Permanent, "dependency_removed", Escalate, "none")},
		{code: "data_integrity", want: noReplay(Permanent, "data_integrity", Escalate, "none")},
		{code: "schema_invalid", want: noReplay(Poison, "schema_invalid", Quarantine, "none")},
		{code: "parse_error", want: noReplay(Poison, "parse_error", Quarantine, "none")},
		{code: "payload_unmarshal_failed", want: noReplay(Poison, "payload_unmarshal_failed", Quarantine, "none")},
		{code: "tool_contract_mismatch", want: noReplay(Poison, "tool_contract_mismatch", Quarantine, "none")},
		{code: "no_pool_mapping", want: noReplay(Poison, "no_pool_mapping", Quarantine, "none")},
		{code: "denied", want: noReplay(Governance, "denied", RequireApproval, "none")},
		{code: "safety_denied", want: noReplay(Governance, "safety_denied", RequireApproval, "none")},
		{code: "approval_required", want: noReplay(Governance, "approval_required", RequireApproval, "none")},
		{code: "policy_snapshot_mismatch", want: noReplay(Governance, "policy_snapshot_mismatch", RequireApproval, "none")},
		{code: "partial_external_write", want: noReplay(UnknownCommitState, "partial_external_write", ManualReview, "none")},
		{code: "unknown_commit_state", want: noReplay(UnknownCommitState, "unknown_commit_state", ManualReview, "none")},
		{code: "stream_limit_deleted", want: noReplay(Permanent, "stream_limit_deleted", Escalate, "none")},
		{code: "unacked_deleted", want: noReplay(Permanent, "unacked_deleted", Escalate, "none")},
		{code: "consumer_filter_rejection", want: noReplay(Permanent, "consumer_filter_rejection", Escalate, "none")},
		// Held for a human before its first attempt (the rule predicted-failure).
		{code: "predicted_failure", want: noReplay(ConditionallyRecoverable, "predicted_failure", RequireApproval, "none")},
		{code: "unknown", want: want{Category: Unknown, Code: "unknown", Route: RouteRecord, Action: AutoReplay, Strategy: "default", MinDelay: t120lo, MaxDelay: t120hi, Budget: 1}},
	}
	p := Default()
	covered := map[string]bool{}
	for _, tc := range tests {
		covered[tc.code] = true
		in := tc.in
		in.Failure = &event.Failure{Code: tc.code, Detail: "detail of " + tc.code}
		checkDecision(t, p, "code "+tc.code, in, Chain{}, tc.want)
	}
	for code := range p.doc.Reasons {
		if !covered[code] {
			t.Errorf("reason code %q of the default policy has no case", code)
		}
	}
}

// checkDecision evaluates with the smallest and the largest jitter and
// compares everything but the delay exactly; DelayRange must give the
// delays of those two decisions.
func checkDecision(t *testing.T, base *Policy, name string, in Input, chain Chain, w want) {
	t.Helper()
	var delays []time.Duration
	for _, r := range []float64{0, 0.999999} {
		p := *base
		p.rand = func() float64 { return r }
		d := p.Evaluate(in, chain)
		delays = append(delays, d.Delay)
		got := want{Category: d.Category, Code: d.ReasonCode, Route: d.Route, Action: d.Action, Strategy: d.Strategy,
			MinDelay: w.MinDelay, MaxDelay: w.MaxDelay, Budget: d.ReplayBudget, Mods: d.Modifications}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s: Evaluate() mismatch (-want +got):\n%s", name, diff)
		}
		if d.Delay < w.MinDelay || d.Delay > w.MaxDelay {
			t.Errorf("%s: Evaluate(rand=%v).Delay = %v, want in [%v, %v]", name, r, d.Delay, w.MinDelay, w.MaxDelay)
		}
		if d.PolicyVersion != base.Version() {
			t.Errorf("%s: PolicyVersion = %q, want %q", name, d.PolicyVersion, base.Version())
		}
	}
	// DelayRange holds every draw, the extremes included, and has room
	// between its ends when the case has any.
	lo, hi := base.DelayRange(in, chain)
	for _, r := range []float64{0.25, 0.5, 0.75} {
		p := *base
		p.rand = func() float64 { return r }
		delays = append(delays, p.Evaluate(in, chain).Delay)
	}
	for _, d := range delays {
		if d < lo || d > hi {
			t.Errorf("%s: Evaluate gave %v outside DelayRange() = %v, %v", name, d, lo, hi)
		}
	}
	if lo != slices.Min(delays) || hi != slices.Max(delays) || (w.MinDelay < w.MaxDelay && lo >= hi) {
		t.Errorf("%s: DelayRange() = %v, %v; want the draws' %v, %v with lo < hi", name, lo, hi, slices.Min(delays), slices.Max(delays))
	}
}

func TestEvaluateDetectionRoutes(t *testing.T) {
	t30lo, t30hi := between(30)
	t10lo, t10hi := between(10)
	t120lo, t120hi := between(120)
	overflow := Modifications{Instructions: []string{"Focus on the core task. Skip background context."}, TargetModel: "large-context", MaxContextTokens: 80000}
	tests := []struct {
		name string
		in   Input
		want want
	}{
		{
			name: "record wins over the TERM reason",
			in:   Input{Kind: "terminated", TermReason: "parse_error", Failure: &event.Failure{Code: "timeout"}},
			want: want{Category: Transient, Code: "timeout", Route: RouteRecord, Action: AutoReplay, Strategy: "transient", MinDelay: t30lo, MaxDelay: t30hi, Budget: 3},
		},
		{
			name: "bare code",
			in:   Input{Kind: "terminated", TermReason: "no_workers"},
			want: want{Category: Transient, Code: "no_workers", Route: RouteTermCode, Action: AutoReplay, Strategy: "transient", MinDelay: t30lo, MaxDelay: t30hi, Budget: 3},
		},
		{
			name: "code: detail",
			in:   Input{Kind: "terminated", TermReason: "schema_invalid: field 'title' missing"},
			want: want{Category: Poison, Code: "schema_invalid", Route: RouteTermDetail, Action: Quarantine, Strategy: "none"},
		},
		{
			name: "JSON reason",
			in:   Input{Kind: "terminated", TermReason: `{"code":"context_window_overflow","detail":"212k tokens"}`},
			want: want{Category: ConditionallyRecoverable, Code: "context_window_overflow", Route: RouteTermJSON, Action: AutoReplay, Strategy: "context_window_overflow", MinDelay: t10lo, MaxDelay: t10hi, Budget: 1, Mods: overflow},
		},
		{
			name: "pattern: context length",
			in:   Input{Kind: "terminated", TermReason: "model said: maximum context length is 128000 tokens"},
			want: want{Category: ConditionallyRecoverable, Code: "context_window_overflow", Route: RoutePattern, Action: AutoReplay, Strategy: "context_window_overflow", MinDelay: t10lo, MaxDelay: t10hi, Budget: 1, Mods: overflow},
		},
		{
			name: "pattern: token limit",
			in:   Input{Kind: "terminated", TermReason: "exceeded token limit"},
			want: want{Category: ConditionallyRecoverable, Code: "context_window_overflow", Route: RoutePattern, Action: AutoReplay, Strategy: "context_window_overflow", MinDelay: t10lo, MaxDelay: t10hi, Budget: 1, Mods: overflow},
		},
		{
			name: "pattern: 429",
			in:   Input{Kind: "terminated", TermReason: "upstream returned 429"},
			want: want{Category: Transient, Code: "llm_provider_rate_limit", Route: RoutePattern, Action: AutoReplay, Strategy: "transient", MinDelay: t30lo, MaxDelay: t30hi, Budget: 3},
		},
		{
			name: "pattern: rate limit",
			in:   Input{Kind: "terminated", TermReason: "Rate limit reached for requests"},
			want: want{Category: Transient, Code: "llm_provider_rate_limit", Route: RoutePattern, Action: AutoReplay, Strategy: "transient", MinDelay: t30lo, MaxDelay: t30hi, Budget: 3},
		},
		{
			name: "pattern: deadline exceeded",
			in:   Input{Kind: "terminated", TermReason: "context deadline exceeded"},
			want: want{Category: Transient, Code: "timeout", Route: RoutePattern, Action: AutoReplay, Strategy: "transient", MinDelay: t30lo, MaxDelay: t30hi, Budget: 3},
		},
		{
			name: "pattern over the record's detail when it has no code",
			in:   Input{Kind: "max_deliver", Failure: &event.Failure{Detail: "request timed out after 60s"}},
			want: want{Category: Transient, Code: "timeout", Route: RoutePattern, Action: AutoReplay, Strategy: "transient", MinDelay: t30lo, MaxDelay: t30hi, Budget: 3},
		},
		{
			name: "server TERM: stream limits",
			in:   Input{Kind: "terminated", TermReason: "Message deleted by stream limits"},
			want: want{Category: Permanent, Code: "stream_limit_deleted", Route: RoutePattern, Action: Escalate, Strategy: "none"},
		},
		{
			name: "server TERM: unacked deleted",
			in:   Input{Kind: "terminated", TermReason: "Unacknowledged message was deleted"},
			want: want{Category: Permanent, Code: "unacked_deleted", Route: RoutePattern, Action: Escalate, Strategy: "none"},
		},
		{
			name: "max deliveries with no record",
			in:   Input{Kind: "max_deliver", Deliveries: 3},
			want: want{Category: Unknown, Code: "unknown", Route: RouteNone, Action: AutoReplay, Strategy: "default", MinDelay: t120lo, MaxDelay: t120hi, Budget: 1},
		},
		{
			name: "unexplained text",
			in:   Input{Kind: "terminated", TermReason: "the agent gave up"},
			want: want{Category: Unknown, Code: "unknown", Route: RouteNone, Action: AutoReplay, Strategy: "default", MinDelay: t120lo, MaxDelay: t120hi, Budget: 1},
		},
		{
			name: "unknown bare code is kept (the taxonomy is extensible)",
			in:   Input{Kind: "terminated", TermReason: "quota_drained"},
			want: want{Category: Unknown, Code: "quota_drained", Route: RouteTermCode, Action: AutoReplay, Strategy: "default", MinDelay: t120lo, MaxDelay: t120hi, Budget: 1},
		},
	}
	p := Default()
	for _, tc := range tests {
		checkDecision(t, p, tc.name, tc.in, Chain{}, tc.want)
	}
}

func TestEvaluateChainRules(t *testing.T) {
	t60lo, t60hi := between(60)
	tests := []struct {
		name  string
		in    Input
		chain Chain
		want  want
	}{
		{
			name:  "transient backs off with the attempt and spends its budget",
			in:    Input{Failure: &event.Failure{Code: "timeout"}},
			chain: Chain{Codes: []string{"timeout"}, Strategies: []string{"transient"}},
			want:  want{Category: Transient, Code: "timeout", Route: RouteRecord, Action: AutoReplay, Strategy: "transient", MinDelay: t60lo, MaxDelay: t60hi, Budget: 2},
		},
		{
			name:  "transient third attempt",
			in:    Input{Failure: &event.Failure{Code: "timeout"}},
			chain: Chain{Codes: []string{"timeout", "timeout"}, Strategies: []string{"transient", "transient"}},
			want:  want{Category: Transient, Code: "timeout", Route: RouteRecord, Action: AutoReplay, Strategy: "transient", MinDelay: between2(120), MaxDelay: sec(120), Budget: 1},
		},
		{
			name:  "transient budget exhausted escalates",
			in:    Input{Failure: &event.Failure{Code: "timeout"}},
			chain: Chain{Codes: []string{"timeout", "timeout", "timeout"}, Strategies: []string{"transient", "transient", "transient"}},
			want:  want{Category: Transient, Code: "timeout", Route: RouteRecord, Action: Escalate, Strategy: "transient"},
		},
		{
			name:  "fifth failure of a chain is poison",
			in:    Input{Failure: &event.Failure{Code: "timeout"}},
			chain: Chain{Codes: []string{"timeout", "model_confusion", "timeout", "hallucination_loop"}, Strategies: []string{"transient", "model_confusion", "transient", "hallucination_loop"}},
			want:  want{Category: Poison, Code: "timeout", Route: RouteRecord, Action: Escalate, Strategy: "none"},
		},
		{
			name:  "second context overflow is quarantined",
			in:    Input{TermReason: "context_window_overflow"},
			chain: Chain{Codes: []string{"context_window_overflow"}, Strategies: []string{"context_window_overflow"}},
			want:  want{Category: ConditionallyRecoverable, Code: "context_window_overflow", Route: RouteTermCode, Action: Quarantine, Strategy: "none"},
		},
		{
			name: "completed steps and a tool failure need manual review",
			in:   Input{Failure: &event.Failure{Code: "timeout", Detail: "tool github.create_pr failed", CompletedSteps: []string{"draft", "push-branch"}}},
			want: want{Category: UnknownCommitState, Code: "timeout", Route: RouteRecord, Action: ManualReview, Strategy: "none"},
		},
		{
			name: "explicit tool failure flag",
			in:   Input{Failure: &event.Failure{Code: "network_transient", ToolFailure: true, CompletedSteps: []string{"charge-card"}}},
			want: want{Category: UnknownCommitState, Code: "network_transient", Route: RouteRecord, Action: ManualReview, Strategy: "none"},
		},
		{
			name: "completed steps without a tool failure replay normally",
			in:   Input{Failure: &event.Failure{Code: "timeout", CompletedSteps: []string{"draft"}}},
			want: want{Category: Transient, Code: "timeout", Route: RouteRecord, Action: AutoReplay, Strategy: "transient", MinDelay: between2(30), MaxDelay: sec(30), Budget: 3},
		},
	}
	p := Default()
	for _, tc := range tests {
		checkDecision(t, p, tc.name, tc.in, tc.chain, tc.want)
	}
}

func between2(n float64) time.Duration { lo, _ := between(n); return lo }

func TestEvaluateTransientCap(t *testing.T) {
	p := *Default()
	p.rand = func() float64 { return 0 }
	// With a bigger budget the exponential delay reaches the 300 s cap.
	s := p.doc.Strategies["transient"]
	s.MaxReplays = 10
	for i := range p.rules {
		if p.rules[i].strategy.Name == "transient" {
			p.rules[i].strategy = s
		}
	}
	chain := Chain{}
	var delays []time.Duration
	for i := 0; i < 6; i++ {
		d := p.Evaluate(Input{Failure: &event.Failure{Code: "network_transient"}}, Chain{Codes: chain.Codes, Strategies: chain.Strategies})
		delays = append(delays, d.Delay)
		chain.Codes = append(chain.Codes, "x")
		chain.Strategies = append(chain.Strategies, "transient")
		if len(chain.Codes) >= 4 {
			break // the fifth failure is poison
		}
	}
	want := []time.Duration{sec(30), sec(60), sec(120), sec(240)}
	if diff := cmp.Diff(want, delays); diff != "" {
		t.Errorf("transient delays (-want +got):\n%s", diff)
	}
	if got := p.delay(s, 5); got != sec(300) {
		t.Errorf("delay(transient, attempt 5) = %v, want 300s (the cap)", got)
	}
}

func TestEvaluateRuleMatchers(t *testing.T) {
	doc := testenv.WithRules(t, defaultYAML, `  - name: vip-tenant
    match: {tenant: [acme], category: [transient]}
    action: require_approval
    strategy: none
  - name: billing-subjects
    match: {subject: ["agents.*.tasks.billing.>"], kind: [terminated]}
    action: escalate
    strategy: none
    escalate_to: finance
  - name: priority-header
    match: {headers: {x-priority: "^urgent$"}, stream: [TASKS]}
    action: auto_replay
    strategy: {name: urgent, delay: {base: 1s}, max_replays: 5}
  - name: agent-and-type
    match: {agent: [marketing], task_type: [social_media]}
    action: discard
    strategy: none
  - name: text
    match: {reason_text: "(?i)quota"}
    action: escalate
    strategy: none
`)
	p, err := Parse(doc, WithRand(func() float64 { return 0 }))
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	if p.Version() == Default().Version() {
		t.Errorf("Version() did not change with the rules")
	}
	tests := []struct {
		name       string
		in         Input
		rule       string
		action     Action
		escalateTo string
	}{
		{"tenant and category", Input{Tenant: "acme", Failure: &event.Failure{Code: "timeout"}}, "vip-tenant", RequireApproval, "ceo"},
		{"other tenant falls through", Input{Tenant: "other", Failure: &event.Failure{Code: "timeout"}}, "transient", AutoReplay, "ceo"},
		{"subject wildcards", Input{Kind: "terminated", Subject: "agents.cto.tasks.billing.refund.eu", TermReason: "timeout"}, "billing-subjects", Escalate, "finance"},
		{"subject > needs a token", Input{Kind: "terminated", Subject: "agents.cto.tasks.billing", TermReason: "timeout"}, "transient", AutoReplay, "ceo"},
		{"header value", Input{Stream: "TASKS", Headers: map[string][]string{"X-Priority": {"low", "urgent"}}}, "priority-header", AutoReplay, "ceo"},
		{"agent and task type", Input{Agent: "marketing", TaskType: "social_media"}, "agent-and-type", Discard, "ceo"},
		{"reason text", Input{TermReason: "monthly quota gone"}, "text", Escalate, "ceo"},
	}
	for _, tc := range tests {
		d := p.Evaluate(tc.in, Chain{})
		if d.Rule != tc.rule || d.Action != tc.action || d.EscalateTo != tc.escalateTo {
			t.Errorf("%s: Evaluate() = rule %q action %q escalate_to %q, want %q %q %q", tc.name, d.Rule, d.Action, d.EscalateTo, tc.rule, tc.action, tc.escalateTo)
		}
	}
	d := p.Evaluate(Input{Stream: "TASKS", Headers: map[string][]string{"x-priority": {"urgent"}}}, Chain{})
	if d.Strategy != "urgent" || d.Delay != time.Second || d.ReplayBudget != 5 {
		t.Errorf("inline strategy: got %s %v budget %d, want urgent 1s budget 5", d.Strategy, d.Delay, d.ReplayBudget)
	}
}

func TestServerTerminatedNeverReplayed(t *testing.T) {
	// A policy that replays everything still escalates server deletions.
	doc := testenv.WithRules(t, defaultYAML, `  - name: replay-everything
    match: {}
    action: auto_replay
    strategy: default
`)
	p, err := Parse(doc)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	for code, text := range event.ServerTermReasons {
		for _, in := range []Input{{Kind: "terminated", TermReason: text}, {Kind: "terminated", TermReason: code}} {
			d := p.Evaluate(in, Chain{})
			if d.Action != Escalate || d.ReasonCode != code || d.Note == "" {
				t.Errorf("Evaluate(%q) = %s %s note %q, want escalate %s with a note", in.TermReason, d.Action, d.ReasonCode, d.Note, code)
			}
		}
	}
}

func TestSubjectMatches(t *testing.T) {
	tests := []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b.c", "a.b.c", true},
		{"a.*.c", "a.x.c", true},
		{"a.*.c", "a.x.y.c", false},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c.d", true},
		{"a.>", "a", false},
		{">", "a", true},
		{"a.*", "a", false},
		{"a.b", "a.b.c", false},
	}
	for _, tc := range tests {
		if got := SubjectMatches(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("SubjectMatches(%q, %q) = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}

func TestParseErrorsNameTheRule(t *testing.T) {
	tests := []struct {
		name    string
		replace [2]string
		want    []string
	}{
		{
			name:    "inline strategy with a bad delay",
			replace: [2]string{"rules:\n", "rules:\n  - name: llm-timeouts\n    match: {reason_code: [llm_provider_timeout]}\n    action: auto_replay\n    strategy: {delay: {base: -5s}, max_replays: 2}\n"},
			want:    []string{"rule 1 (name llm-timeouts): strategy.delay.base"},
		},
		{
			name:    "unknown action",
			replace: [2]string{"    action: auto_replay\n    strategy: transient\n", "    action: retry_forever\n    strategy: transient\n"},
			want:    []string{"rule 7 (name transient): action", "retry_forever"},
		},
		{
			name:    "undefined strategy",
			replace: [2]string{"strategy: hallucination_loop\n", "strategy: hallucinate_harder\n"},
			want:    []string{"rule 9 (name hallucination): strategy", "hallucinate_harder"},
		},
		{
			name:    "bad subject pattern",
			replace: [2]string{"  - name: permanent\n    match: {category: [permanent]}", "  - name: permanent\n    match: {category: [permanent], subject: [\"a.>.b\"]}"},
			want:    []string{"rule 12 (name permanent): match.subject"},
		},
		{
			name:    "bad regexp",
			replace: [2]string{"  - name: governance\n    match: {category: [governance]}", "  - name: governance\n    match: {category: [governance], reason_text: \"(\"}"},
			want:    []string{"rule 14 (name governance): match.reason_text"},
		},
		{
			name:    "unknown reason code in a rule",
			replace: [2]string{"match: {reason_code: [model_confusion]}", "match: {reason_code: [model_confusoin]}"},
			want:    []string{"rule 11 (name model-confusion): match", "model_confusoin"},
		},
		{
			name:    "server deletions may not be auto-replayed",
			replace: [2]string{"    match: {reason_code: [stream_limit_deleted, unacked_deleted]}\n    action: escalate", "    match: {reason_code: [stream_limit_deleted, unacked_deleted]}\n    action: auto_replay"},
			want:    []string{"rule 4 (name server-terminated): action"},
		},
		{
			name:    "named strategy delay",
			replace: [2]string{"delay: {base: 120s}", "delay: {base: 120s, max: 10s}"},
			want:    []string{"strategy default.delay.max"},
		},
		{
			name:    "unknown field",
			replace: [2]string{"  jitter: 0.2\n", "  jitter: 0.2\n  jiter: 0.3\n"},
			want:    []string{"field jiter not found"},
		},
		{
			name:    "unknown category",
			replace: [2]string{"no_workers: transient", "no_workers: transitory"},
			want:    []string{"reasons.no_workers", "transitory"},
		},
		// Retention, in a rule and in each default.
		{
			name:    "rule with minutes",
			replace: [2]string{"rules:\n", "rules:\n  - name: short\n    match: {agent: [a]}\n    action: escalate\n    strategy: none\n    retention: 30m\n"},
			want:    []string{"rule 1 (name short): retention", `"30m"`},
		},
		{
			name:    "rule above ten years",
			replace: [2]string{"rules:\n", "rules:\n  - name: forever\n    match: {agent: [a]}\n    action: escalate\n    strategy: none\n    retention: 4000d\n"},
			want:    []string{"rule 1 (name forever): retention", "3650d"},
		},
		{
			name:    "policy default",
			replace: [2]string{"  retention: 30d\n", "  retention: soon\n"},
			want:    []string{"defaults.retention:", `"soon"`},
		},
		{
			name:    "agent default",
			replace: [2]string{"defaults:\n", "defaults:\n  retention_by_agent: {devops: 0d}\n"},
			want:    []string{"defaults.retention_by_agent.devops"},
		},
		{
			name:    "tenant default",
			replace: [2]string{"defaults:\n", "defaults:\n  retention_by_tenant: {acme: 1y}\n"},
			want:    []string{"defaults.retention_by_tenant.acme"},
		},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(edited(t, tc.replace)))
		wantInvalid(t, tc.name, err, tc.want)
	}
}

func TestVersionIsContentHash(t *testing.T) {
	a := Default()
	// Comments and formatting do not change the version; content does.
	reformatted := "# a comment\n" + strings.ReplaceAll(string(defaultYAML), "  jitter: 0.2", "  jitter: 0.20   # same")
	b, err := Parse([]byte(reformatted))
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	if a.Version() != b.Version() {
		t.Errorf("Version() = %s after reformatting, want %s", b.Version(), a.Version())
	}
	c, err := Parse([]byte(strings.Replace(string(defaultYAML), "  jitter: 0.2", "  jitter: 0.3", 1)))
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	if c.Version() == a.Version() || len(a.Version()) != 12 {
		t.Errorf("Version() = %s and %s, want different 12-digit versions", a.Version(), c.Version())
	}
}

// The agent's Retryable mark is honoured as agentkit documents it: false
// stops a replay the policy would make; true replays a permanent failure
// once; neither moves poison, governance or the server's own deletions.
func TestAgentRetryable(t *testing.T) {
	p := Default()
	yes, no := true, false
	tests := []struct {
		name      string
		code      string
		retryable *bool
		chain     Chain
		action    Action
		strategy  string
	}{
		{"transient, no mark", "network_transient", nil, Chain{}, AutoReplay, "transient"},
		{"transient marked not retryable", "network_transient", &no, Chain{}, Escalate, "transient"},
		{"overflow marked not retryable", "context_window_overflow", &no, Chain{}, Escalate, "context_window_overflow"},
		{"permanent, no mark", "impossible_task", nil, Chain{}, Escalate, "none"},
		{"permanent marked retryable", "impossible_task", &yes, Chain{}, AutoReplay, "agent_retryable"},
		{"permanent marked retryable, replayed once already", "impossible_task", &yes,
			Chain{Codes: []string{"impossible_task"}, Strategies: []string{"agent_retryable"}}, Escalate, "agent_retryable"},
		{"poison marked retryable", "parse_error", &yes, Chain{}, Quarantine, "none"},
		{"governance marked retryable", "approval_required", &yes, Chain{}, RequireApproval, "none"},
		{"server deletion marked retryable", "stream_limit_deleted", &yes, Chain{}, Escalate, "none"},
		{"permanent marked not retryable", "impossible_task", &no, Chain{}, Escalate, "none"},
	}
	for _, tt := range tests {
		in := Input{Kind: "explicit", Failure: &event.Failure{Code: tt.code, Retryable: tt.retryable}}
		d := p.Evaluate(in, tt.chain)
		if d.Action != tt.action || d.Strategy != tt.strategy {
			t.Errorf("%s: Evaluate(%s, retryable %v) = %s/%s, want %s/%s (note %q)", tt.name, tt.code, tt.retryable, d.Action, d.Strategy, tt.action, tt.strategy, d.Note)
		}
	}
}
