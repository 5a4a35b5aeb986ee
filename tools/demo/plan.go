package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/triage"
)

// The fleet: the default policy's capability map (docs/policy.md) plus the
// fallback agent (ceo), who also takes planning tasks of its own.
var fleet = []string{"cto", "backend", "frontend", "marketing", "devops", "cso", "ceo"}

var capabilities = map[string][]string{
	"cto":       {"code_review", "architecture", "technical_writing", "debugging"},
	"backend":   {"code_review", "implementation", "api_design", "debugging"},
	"frontend":  {"implementation", "ui_review", "technical_writing"},
	"marketing": {"content_creation", "technical_writing", "social_media"},
	"devops":    {"deployment", "monitoring", "infrastructure", "debugging"},
	"cso":       {"security_review", "vulnerability_scan", "compliance"},
	"ceo":       {"planning"},
}

// Failure modes of examples/agent (X-Demo-Fail) the demo uses.
const (
	modeTransient     = "transient"
	modeSilent        = "silent" // NAKs without a reason on every delivery, replays included
	modeContext       = "context_window_overflow"
	modeHallucination = "hallucination_loop"
	modeTokenBudget   = "token_budget_exceeded"
	modePermanent     = "permanent"
)

// Expected categories (the policy's names) and paths into the DLQ.
const (
	catTransient   = "transient"
	catConditional = "conditionally_recoverable"
	catPermanent   = "permanent"

	pathMaxDeliver = "max deliveries"
	pathTerminate  = "explicit terminate"
	pathContext    = "context overflow"
	pathFilter     = "consumer filter rejection"
)

// The learnable classes: failures that depend on what a task is, which the
// predictions learn in the first phase and treat before the first attempt
// in the second (docs/predictions.md). Every task of the loop class's agent
// and type loops; every task of the overflow class's agent and type that
// carries a large context overflows, and as many healthy ones of that agent
// and type are small: the size tells them apart, not the type.
const (
	classOverflow = "overflow"
	classLoop     = "loop"

	overflowAgent, overflowType = "backend", "implementation"
	loopAgent, loopType         = "marketing", "social_media"
	// overflowTokens is the context an overflow task needs: more than the
	// agent's window (8000), within what the context strategy's larger
	// model holds, so the strategy applied up front saves the task.
	overflowTokens = 16000
	// bytesPerToken sizes an overflow task's payload: its context travels
	// with it, so its size tells it apart (the predictions' size feature).
	bytesPerToken = 3
)

// The long tasks: one healthy task per agent whose work takes longWork,
// four times the agents' ack deadline of a first delivery (ackDeadline: the
// consumers' BackOff begins with 1 s, which the server waits instead of
// AckWait). agentkit keeps them alive; without it each would be redelivered
// mid-work and, once its claim lapsed, run twice.
const (
	ackDeadline = time.Second
	longWork    = 4 * ackDeadline
)

// learnableShare is the share of the tasks in each learnable class, and
// minLearnable its least size: enough for the demo policy's min_support.
const (
	learnableShare = 0.04
	minLearnable   = 10
)

// task is one task the demo publishes and what it expects of it.
type task struct {
	N             int
	ID            string // X-Task-ID; the idempotency key is ID + "-v1"
	Agent, Type   string
	Tenant        string
	Mode          string // "" healthy
	Code          string // X-Demo-Fail-Code
	ContextTokens int    // X-Demo-Context-Tokens
	Category      string // expected category when it dies
	Path          string // expected path into the DLQ
	Recovers      bool   // a dead task that a replay should resolve
	// Class is the learnable class of the task ("" none); ContextBytes
	// the context its payload carries.
	Class        string
	ContextBytes int
	// WorkTime is how long its work takes when it is longer than the
	// agents' default (X-Demo-Work-Time): a long task.
	WorkTime time.Duration
}

func (t task) Subject() string { return "agents." + t.Agent + ".tasks." + t.Type }

// message is what the demo publishes for t: its payload and headers.
func (t task) message() (payload []byte, headers map[string][]string) {
	h := map[string][]string{
		"X-Task-ID":         {t.ID},
		"X-Idempotency-Key": {t.ID + "-v1"},
		"X-Tenant-ID":       {t.Tenant},
		"X-Task-Type":       {t.Type},
	}
	if t.Mode != "" {
		h["X-Demo-Fail"] = []string{t.Mode}
	}
	if t.Code != "" {
		h["X-Demo-Fail-Code"] = []string{t.Code}
	}
	if t.ContextTokens > 0 {
		h["X-Demo-Context-Tokens"] = []string{strconv.Itoa(t.ContextTokens)}
	}
	if t.WorkTime > 0 {
		h["X-Demo-Work-Time"] = []string{t.WorkTime.String()}
	}
	body := map[string]any{"task": t.ID, "type": t.Type, "tenant": t.Tenant, "prompt": "Do the " + t.Type + " task " + t.ID}
	if t.ContextBytes > 0 {
		body["context"] = strings.Repeat("background ", t.ContextBytes/len("background "))
	}
	payload, _ = json.Marshal(body)
	return payload, h
}

// reason is the reason code t dies with at its first attempt (the demo
// agent's for its mode), "" for a healthy task.
func (t task) reason() string {
	switch {
	case t.Mode == "":
		return ""
	case t.Code != "":
		return t.Code
	}
	return map[string]string{modeTransient: "llm_provider_timeout", modeSilent: triage.ReasonUnknown, modeContext: "context_window_overflow",
		modeHallucination: "hallucination_loop", modeTokenBudget: "token_budget_exceeded", modePermanent: "impossible_task"}[t.Mode]
}

// mix is how many dead tasks of each kind a plan has.
type mix struct {
	Transient, Persistent         int // persistent: transient failures a retry does not fix (11 %)
	ContextOK, ContextHuge        int // context overflow fixed / not fixed by the modified replay
	Hallucination, TokenBudget    int
	Impossible, FilterRejection   int
	Dead, Healthy                 int
	Conditional, Permanent, Total int
	// Overflowing and Looping are the learnable classes, outside the
	// field reports' mix (Dead): every one of them dies when untreated.
	Overflowing, Looping int
}

// The field figures (docs/SCALING.md): 61 % transient (89 % resolve on
// retry), 24.6 % conditionally recoverable (62 % resolve with a modified
// retry), 14.4 % permanent; paths 61 % max deliveries, 22 % explicit
// terminate, 14 % context overflow, 3 % consumer filter rejection.
func mixFor(total int, deadRate float64) mix {
	m := mix{Total: total}
	m.Dead = int(math.Round(float64(total) * deadRate))
	m.Overflowing = max(int(math.Round(float64(total)*learnableShare)), minLearnable)
	m.Looping = m.Overflowing
	m.Healthy = total - m.Dead - m.Overflowing - m.Looping
	transient := int(math.Round(float64(m.Dead) * 0.61))
	m.Conditional = int(math.Round(float64(m.Dead) * 0.246))
	m.Permanent = m.Dead - transient - m.Conditional
	m.Persistent = int(math.Round(float64(transient) * 0.11))
	m.Transient = transient - m.Persistent
	context := min(int(math.Round(float64(m.Dead)*0.14)), m.Conditional)
	rest := m.Conditional - context
	m.Hallucination = (rest + 1) / 2
	m.TokenBudget = rest - m.Hallucination
	// Hallucination and token-budget replays carry the fix; the overflow
	// ones make up the rest of the 62 %.
	recover := int(math.Round(float64(m.Conditional) * 0.62))
	m.ContextOK = min(max(recover-rest, 0), context)
	m.ContextHuge = context - m.ContextOK
	m.FilterRejection = min(int(math.Round(float64(m.Dead)*0.03)), m.Permanent)
	m.Impossible = m.Permanent - m.FilterRejection
	return m
}

// tenantsFor is how many tenants the dead tasks are spread over. A tenant
// breaker opens at 10 failures in 10 minutes (docs/storage.md, "Tenant circuit
// breakers"); at most 2.5 dead tasks per tenant keeps every tenant below it,
// replays that die again included, so no replay is held for 15 minutes.
func tenantsFor(dead int) int { return max(30, (2*dead+4)/5) }

// tenantName is tenant i of n. The run id is part of the name: a demo run
// again on a stack kept up (KEEP=1) must not meet the breakers the previous
// run's failures filled within the last 10 minutes.
func tenantName(run string, i, n int) string { return fmt.Sprintf("t%02d-%s", i%n+1, run) }

// deaths is how often a task of the plan dies: a persistent transient one
// at its first delivery and after each of the transient strategy's three
// replays, an overflow too large for the replay twice.
func (t task) deaths() int {
	switch {
	case t.Mode == modeSilent:
		return 4
	case t.Mode == modeContext && !t.Recovers:
		return 2
	case t.Mode != "":
		return 1
	}
	return 0
}

// plan makes the demo's tasks in publish order.
func plan(run string, total int, deadRate float64, seed uint64) ([]task, mix) {
	m := mixFor(total, deadRate)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var dead []task
	add := func(n int, t task) {
		for i := 0; i < n; i++ {
			dead = append(dead, t)
		}
	}
	add(m.Transient, task{Mode: modeTransient, Category: catTransient, Path: pathMaxDeliver, Recovers: true})
	add(m.Persistent, task{Mode: modeSilent, Category: catTransient, Path: pathMaxDeliver})
	add(m.ContextOK, task{Mode: modeContext, ContextTokens: 16000, Category: catConditional, Path: pathContext, Recovers: true})
	add(m.ContextHuge, task{Mode: modeContext, ContextTokens: 200000, Category: catConditional, Path: pathContext})
	add(m.Hallucination, task{Mode: modeHallucination, Category: catConditional, Path: pathTerminate, Recovers: true})
	add(m.TokenBudget, task{Mode: modeTokenBudget, Category: catConditional, Path: pathTerminate, Recovers: true})
	add(m.Impossible, task{Mode: modePermanent, Category: catPermanent, Path: pathTerminate})
	add(m.FilterRejection, task{Mode: modePermanent, Code: "consumer_filter_rejection", Category: catPermanent, Path: pathFilter})
	workers := fleet[:len(fleet)-1] // ceo is the escalation target, not a failing worker
	for i := range dead {
		dead[i].Agent = workers[i%len(workers)]
	}
	add(m.Overflowing, task{Agent: overflowAgent, Type: overflowType, Mode: modeContext, ContextTokens: overflowTokens,
		ContextBytes: overflowTokens * bytesPerToken, Category: catConditional, Path: pathContext, Recovers: true, Class: classOverflow})
	add(m.Looping, task{Agent: loopAgent, Type: loopType, Mode: modeHallucination, Category: catConditional, Path: pathTerminate,
		Recovers: true, Class: classLoop})
	tenants := tenantsFor(len(dead))
	for i := range dead {
		dead[i].Tenant = tenantName(run, i, tenants)
	}
	tasks := dead
	for i := 0; i < m.Healthy; i++ {
		t := task{Agent: fleet[i%len(fleet)], Tenant: tenantName(run, rng.IntN(tenants), tenants)}
		if i < m.Overflowing {
			// As many small tasks of the overflow class's agent and type
			// as large ones: what overflows is the size, not the type.
			t.Agent, t.Type = overflowAgent, overflowType
		}
		tasks = append(tasks, t)
	}
	rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	for i := range tasks {
		t := &tasks[i]
		t.N = i + 1
		t.ID = fmt.Sprintf("demo-%s-%04d", run, t.N)
		if t.Type != "" {
			continue // a learnable class's
		}
		// Every task of the loop class's agent and type loops: the
		// others take the agent's other types.
		types := slices.DeleteFunc(slices.Clone(capabilities[t.Agent]), func(tt string) bool { return t.Agent == loopAgent && tt == loopType })
		t.Type = types[rng.IntN(len(types))]
	}
	long := map[string]bool{}
	for i := range tasks {
		t := &tasks[i]
		if t.Mode == "" && t.Class == "" && !(t.Agent == overflowAgent && t.Type == overflowType) && !long[t.Agent] {
			t.WorkTime, long[t.Agent] = longWork, true
		}
	}
	return tasks, m
}

// expectedRecovery is the share of a category's dead tasks of the field
// reports' mix the plan expects to resolve.
func expectedRecovery(tasks []task, category string) (dead, recover int) {
	for _, t := range tasks {
		if t.Mode != "" && t.Class == "" && t.Category == category {
			dead++
			if t.Recovers {
				recover++
			}
		}
	}
	return dead, recover
}
