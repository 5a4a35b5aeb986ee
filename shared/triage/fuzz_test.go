package triage

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
)

// FuzzParse feeds arbitrary documents to the policy loader (the override in
// Firestore is operator input). Properties: a refusal wraps ErrInvalid (the
// loader keeps the policy in force only for those); an accepted policy's
// canonical form parses to the same version (the version is a content hash,
// so it must be a fixed point), and evaluating it on a dead task never panics
// and yields a valid category and action with a delay inside the strategy's
// bounds.
func FuzzParse(f *testing.F) {
	def := DefaultYAML()
	f.Add(def)
	f.Add([]byte(strings.Replace(string(def), "jitter:", "jiter:", 1)))
	f.Add([]byte(strings.Replace(string(def), "base: 30s", "base: -30s", 1)))
	f.Add([]byte("rules: [}"))
	f.Add([]byte("reasons: {unknown: unknown}\nrules: [{name: a, match: {}, action: auto_replay, strategy: {delay: {base: 1s, factor: 2, max: 1s}, max_replays: 1}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, WithRand(func() float64 { return 0.5 }))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error %v does not wrap ErrInvalid", err)
			}
			return
		}
		again, err := Parse(p.Canonical(), WithRand(func() float64 { return 0.5 }))
		if err != nil {
			t.Fatalf("Parse(Canonical()) = %v; the canonical form of an accepted policy must parse", err)
		}
		if again.Version() != p.Version() {
			t.Fatalf("canonical version %s, first version %s: the version must be a fixed point", again.Version(), p.Version())
		}
		for _, in := range []Input{
			{Kind: "terminated", Stream: "TASKS", Subject: "agents.backend.tasks.code_review", Tenant: "acme", Agent: "backend", TaskType: "code_review", TermReason: "context length exceeded"},
			{Kind: "max_deliver", Stream: "TASKS", Subject: "x", Tenant: "t", Failure: &event.Failure{Code: "timeout", CompletedSteps: []string{"a"}}},
			{Kind: "terminated", Stream: "WQ", TermReason: "Unacknowledged message was deleted"},
		} {
			checkFuzzDecision(t, p, in, p.Evaluate(in, Chain{Codes: []string{"timeout"}, Strategies: []string{"transient"}}))
		}
	})
}

// FuzzTermReason feeds arbitrary TERM reasons and failure codes to the
// reason detection of the default policy: a bare code, "code: detail",
// {"code","detail"} or free text.
func FuzzTermReason(f *testing.F) {
	for _, s := range []string{"no_workers", "context_window_overflow: 140k tokens", `{"code":"timeout","detail":"x"}`,
		"rate limit 429", "Message deleted by stream limits", "Unacknowledged message was deleted", `{"code":`, ":", "UNKNOWN_CODE"} {
		f.Add(s, "")
	}
	f.Add("", "llm_provider_timeout")
	f.Add("timeout", " Hallucination_Loop ")
	p := Default(WithRand(func() float64 { return 0.5 }))
	f.Fuzz(func(t *testing.T, reason, code string) {
		in := Input{Kind: "terminated", Stream: "TASKS", Subject: "agents.backend.tasks.code_review", Tenant: "acme",
			Agent: "backend", TaskType: "code_review", TermReason: reason}
		if code != "" {
			in.Failure = &event.Failure{Code: code, Detail: reason}
		}
		d := p.Evaluate(in, Chain{})
		checkFuzzDecision(t, p, in, d)
		trimmed := strings.TrimSpace(reason)
		switch {
		case strings.TrimSpace(code) != "":
			if d.Route != RouteRecord || d.ReasonCode != strings.ToLower(strings.TrimSpace(code)) {
				t.Fatalf("Evaluate(record %q) = %s via %s, want the record's code", code, d.ReasonCode, d.Route)
			}
		case d.Route == RouteTermCode:
			if d.ReasonCode != strings.ToLower(trimmed) {
				t.Fatalf("Evaluate(reason %q) = code %q via term_code, want the reason itself", reason, d.ReasonCode)
			}
		case d.Route == RouteTermJSON:
			if !strings.HasPrefix(trimmed, "{") {
				t.Fatalf("Evaluate(reason %q) routed term_json without JSON", reason)
			}
		case d.Route == RouteTermDetail:
			if c, _, _ := strings.Cut(trimmed, ":"); strings.TrimSpace(c) != d.ReasonCode {
				t.Fatalf("Evaluate(reason %q) = code %q via term_detail, want the text before ':'", reason, d.ReasonCode)
			}
		case d.Route == RouteNone:
			if d.ReasonCode != ReasonUnknown {
				t.Fatalf("Evaluate(reason %q) = code %q via none, want unknown", reason, d.ReasonCode)
			}
		case d.Route != RoutePattern:
			t.Fatalf("Evaluate(reason %q) route %q", reason, d.Route)
		}
	})
}

func checkFuzzDecision(t *testing.T, p *Policy, in Input, d Decision) {
	t.Helper()
	if d.ReasonCode == "" || d.Rule == "" && d.Action == "" {
		t.Fatalf("Evaluate(%+v) = %+v: no reason code or action", in, d)
	}
	if !validCategory(d.Category) {
		t.Fatalf("Evaluate(%+v) category %q is not a category", in, d.Category)
	}
	if !validAction(d.Action) {
		t.Fatalf("Evaluate(%+v) action %q is not an action", in, d.Action)
	}
	if d.PolicyVersion != p.Version() {
		t.Fatalf("Evaluate policy version %q, want %q", d.PolicyVersion, p.Version())
	}
	if serverTerminated(d.ReasonCode) && d.Action == AutoReplay {
		t.Fatalf("Evaluate(%+v) auto-replays a server-terminated message", in)
	}
	if d.Action == AutoReplay {
		if d.ReplayBudget <= 0 {
			t.Fatalf("Evaluate(%+v) replays with budget %d", in, d.ReplayBudget)
		}
		if d.Delay < 0 || d.Delay > 30*24*time.Hour {
			t.Fatalf("Evaluate(%+v) delay %v outside [0, 30 days] (Cloud Tasks' schedule limit)", in, d.Delay)
		}
	}
}
