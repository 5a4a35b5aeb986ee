package event_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jsdlq/jsdlq/shared/event"
)

func TestParseSubject(t *testing.T) {
	c := event.DefaultConventions
	tests := []struct {
		subject string
		want    event.Subject
		ok      bool
	}{
		{"agents.backend.tasks.code_review", event.Subject{Agent: "backend", TaskType: "code_review"}, true},
		{"agents.backend.tasks.review.deep", event.Subject{Agent: "backend", TaskType: "review.deep"}, true},
		{"agents.backend.tasks", event.Subject{Agent: "backend"}, true},
		{"agents..tasks.x", event.Subject{}, false},
		{"workers.backend.tasks.x", event.Subject{}, false},
		{"agents.backend.jobs.x", event.Subject{}, false},
		{"", event.Subject{}, false},
	}
	for _, tt := range tests {
		got, ok := c.ParseSubject(tt.subject)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseSubject(%q) = %+v, %v, want %+v, %v", tt.subject, got, ok, tt.want, tt.ok)
		}
	}
	if got := c.TaskSubject("cto", "debugging"); got != "agents.cto.tasks.debugging" {
		t.Errorf("TaskSubject(cto, debugging) = %q", got)
	}
}

func TestConventionsReadHeaders(t *testing.T) {
	c := event.DefaultConventions
	tests := []struct {
		name                        string
		subject                     string
		h                           map[string][]string
		tenant, agent, typ, idemKey string
	}{
		{"nothing set", "agents.cto.tasks.debugging", nil, "default", "cto", "debugging", ""},
		{"headers win over the subject", "agents.cto.tasks.debugging",
			map[string][]string{"x-tenant-id": {"acme"}, "X-Agent": {"backend"}, "X-Task-Type": {"review"}, "X-Task-ID": {"t1"}},
			"acme", "backend", "review", "t1"},
		{"task id and version", "x.y", map[string][]string{"X-Task-ID": {"t1"}, "X-Task-Version": {"3"}}, "default", "", "", "t1-3"},
		{"explicit key wins", "x.y", map[string][]string{"X-Task-ID": {"t1"}, "X-Task-Version": {"3"}, "X-Idempotency-Key": {"k"}},
			"default", "", "", "k"},
	}
	for _, tt := range tests {
		if got := c.Tenant(tt.h); got != tt.tenant {
			t.Errorf("%s: Tenant = %q, want %q", tt.name, got, tt.tenant)
		}
		if got := c.Agent(tt.subject, tt.h); got != tt.agent {
			t.Errorf("%s: Agent = %q, want %q", tt.name, got, tt.agent)
		}
		if got := c.TaskType(tt.subject, tt.h); got != tt.typ {
			t.Errorf("%s: TaskType = %q, want %q", tt.name, got, tt.typ)
		}
		if got := c.IdempotencyKey(tt.h); got != tt.idemKey {
			t.Errorf("%s: IdempotencyKey = %q, want %q", tt.name, got, tt.idemKey)
		}
	}
}

// A replay's headers read back as they were written; an earlier replay's
// headers are replaced, and line breaks cannot break a header value.
func TestReplayHeadersRoundTrip(t *testing.T) {
	r := event.Replay{Of: "TASKS.7", Attempt: 2, Strategy: "context_window_overflow",
		Instructions: []string{"Focus on the core task.\nSkip background context."}, TargetModel: "large",
		MaxContextTokens: 80000, MaxOutputTokens: 4800, CompletedSteps: []string{"draft", "push-branch"}}
	h := map[string][]string{"X-Task-ID": {"t1"}, "jsdlq-strategy": {"old"}, "Jsdlq-Instruction": {"old one"}}
	r.Set(h)
	got := event.ParseReplay(h)
	want := r
	want.Instructions = []string{"Focus on the core task. Skip background context."}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseReplay(Set(r)) mismatch (-want +got):\n%s", diff)
	}
	if h["X-Task-ID"][0] != "t1" || h["jsdlq-strategy"] != nil {
		t.Errorf("Set kept an old replay header or dropped a task header: %v", h)
	}
	if got := event.ParseReplay(map[string][]string{"Jsdlq-Max-Context-Tokens": {"lots"}}); got.MaxContextTokens != 0 || got.IsReplay() {
		t.Errorf("ParseReplay(malformed) = %+v, want zero", got)
	}
	copied := event.CopyForReplay(map[string][]string{"Nats-Msg-Id": {"x"}, "Jsdlq-Replay-Of": {"y"}, "X-Task-ID": {"t"}})
	if diff := cmp.Diff(map[string][]string{"X-Task-ID": {"t"}}, copied); diff != "" {
		t.Errorf("CopyForReplay mismatch (-want +got):\n%s", diff)
	}
}

// Jsdlq-* headers are jsdlq's whatever their case; JetStream's Nats-*
// headers are control headers too, but not replay headers; a name that
// only contains the prefix is neither. The identity headers (tenant,
// idempotency key, task id and version) are neither.
func TestReplayAndControlHeaders(t *testing.T) {
	for _, tt := range []struct {
		name                      string
		replay, control, identity bool
	}{
		{"Jsdlq-Replay-Of", true, true, false},
		{"jsdlq-strategy", true, true, false},
		{"JSDLQ-X", true, true, false},
		{"Nats-Msg-Id", false, true, false},
		{"nats-expected-stream", false, true, false},
		{"X-Jsdlq-Replay-Of", false, false, false},
		{"Jsdlq", false, false, false},
		{"X-Task-ID", false, false, true},
		{"x-task-id", false, false, true},
		{"X-Tenant-ID", false, false, true},
		{"x-tenant-id", false, false, true},
		{"X-Idempotency-Key", false, false, true},
		{"X-Task-Version", false, false, true},
		{"X-Task-Type", false, false, false},
		{"X-Reviewed-By", false, false, false},
	} {
		if got := event.IsReplayHeader(tt.name); got != tt.replay {
			t.Errorf("IsReplayHeader(%q) = %v, want %v", tt.name, got, tt.replay)
		}
		if got := event.IsControlHeader(tt.name); got != tt.control {
			t.Errorf("IsControlHeader(%q) = %v, want %v", tt.name, got, tt.control)
		}
		if got := event.DefaultConventions.IsIdentityHeader(tt.name); got != tt.identity {
			t.Errorf("DefaultConventions.IsIdentityHeader(%q) = %v, want %v", tt.name, got, tt.identity)
		}
	}
}

// Reassign names the new agent in the agent header however it was written,
// under the conventions' header name, and adds none where there was none.
func TestReassign(t *testing.T) {
	for _, tt := range []struct {
		name string
		conv event.Conventions
		h    map[string][]string
		want map[string][]string
	}{
		{"canonical", event.DefaultConventions, map[string][]string{"X-Agent": {"backend"}, "X-Task-ID": {"t"}},
			map[string][]string{"X-Agent": {"cto"}, "X-Task-ID": {"t"}}},
		{"other case", event.DefaultConventions, map[string][]string{"x-agent": {"backend"}}, map[string][]string{"x-agent": {"cto"}}},
		{"no agent header", event.DefaultConventions, map[string][]string{"X-Task-ID": {"t"}}, map[string][]string{"X-Task-ID": {"t"}}},
		{"zero conventions", event.Conventions{}, map[string][]string{"X-Agent": {"backend"}}, map[string][]string{"X-Agent": {"cto"}}},
	} {
		tt.conv.Reassign(tt.h, "cto")
		if diff := cmp.Diff(tt.want, tt.h); diff != "" {
			t.Errorf("Reassign(%s) mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

// A direct get's own headers go, in any case; the publisher's stay, and a
// message that had none reads back with none (nil).
func TestDropDirectGetHeaders(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    map[string][]string
		want map[string][]string
	}{
		{"publisher's kept", map[string][]string{"Nats-Stream": {"W"}, "nats-sequence": {"7"}, "Nats-Time-Stamp": {"t"}, "Nats-Subject": {"s"}, "X-Task-ID": {"t1"}, "Nats-Msg-Id": {"m"}},
			map[string][]string{"X-Task-ID": {"t1"}, "Nats-Msg-Id": {"m"}}},
		{"only the get's", map[string][]string{"Nats-Stream": {"W"}, "Nats-Sequence": {"7"}, "Nats-Last-Sequence": {"6"}, "Nats-Num-Pending": {"0"}, "Nats-UpTo-Sequence": {"9"}}, nil},
		{"none", nil, nil},
	} {
		if diff := cmp.Diff(tt.want, event.DropDirectGetHeaders(tt.h)); diff != "" {
			t.Errorf("DropDirectGetHeaders(%s) mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}
