package event_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/event"
)

func TestParseTenant(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"acme", true},
		{"org/team", true}, // a '/' is data: the URL encoder escapes it
		{"../entries/x/discard?", true},
		{"%2F", true},
		{"a?b#c", true},
		{"Zürich 北京", true},
		{"a b", true},
		{strings.Repeat("x", event.MaxNameBytes), true},
		{"", false},
		{".", false},
		{"..", false},
		{"/", false},
		{" acme", false},
		{"acme\t", false},
		{"a\nb", false},
		{"a\x1b[31mb", false},
		{"a\x7fb", false},
		{"a\u0085b", false}, // C1
		{"abc\u202edcba", false},
		{"a\u200bb", false}, // zero width
		{"a\u00a0b", false}, // no-break space
		{"a\xffb", false},
		{strings.Repeat("x", event.MaxNameBytes+1), false},
		{strings.Repeat("x", 10000), false},
		{event.ReservedTenant, false},
		{"(none)", false},
	} {
		_, err := event.ParseTenant(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseTenant(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
		if err != nil && !errors.Is(err, event.ErrBadName) {
			t.Errorf("ParseTenant(%q) = %v, want ErrBadName", tc.in, err)
		}
	}
}

// The reserved tenant is a tenant entries are stored under, never one the
// wire can name.
func TestParseStoredTenant(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{event.ReservedTenant, true},
		{"acme", true},
		{"(others)", false},
		{"a\u202eb", false},
	} {
		got, err := event.ParseStoredTenant(tc.in)
		if (err == nil) != tc.ok || tc.ok && got.String() != tc.in {
			t.Errorf("ParseStoredTenant(%q) = %q, %v, want ok %v", tc.in, got, err, tc.ok)
		}
	}
}

func TestParseStream(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"TASKS", true},
		{"WORK~EU", true},
		{"TASKS@EU", true},
		{"A\u202eB", true}, // JetStream allows it: outputs escape it
		{"A\x01B", true},   // likewise
		{"A#B?C%2F", true}, // likewise
		{"A.B", false},     // the event id's separator
		{"A B", false},     // white space
		{"A/B", false},     // path separators
		{`A\B`, false},     //
		{"A*", false},      // wildcards
		{"A>", false},      //
		{"A\fB", false},    //
		{"", false},        //
		{"A\xffB", false},  // not UTF-8
		{strings.Repeat("S", event.MaxStreamBytes), true},
		{strings.Repeat("S", event.MaxStreamBytes+1), false},
	} {
		if _, err := event.ParseStream(tc.in); (err == nil) != tc.ok {
			t.Errorf("ParseStream(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}

func TestAgentAndTaskTypeFollowTheRuleWithoutTheReservedPrefix(t *testing.T) {
	for _, in := range []string{"(planner)", "a.b.c", "agents/x"} {
		if _, err := event.ParseAgent(in); err != nil {
			t.Errorf("ParseAgent(%q) = %v, want ok", in, err)
		}
		if _, err := event.ParseTaskType(in); err != nil {
			t.Errorf("ParseTaskType(%q) = %v, want ok", in, err)
		}
	}
	for _, in := range []string{"", "a\u202eb", "x\x00", strings.Repeat("a", 300)} {
		if _, err := event.ParseAgent(in); err == nil {
			t.Errorf("ParseAgent(%q) = ok, want an error", in)
		}
		if _, err := event.ParseTaskType(in); err == nil {
			t.Errorf("ParseTaskType(%q) = ok, want an error", in)
		}
	}
}

// A task is never refused for its names: what breaks the rule sends it to
// the reserved tenant and is kept, bounded, as data.
func TestCheckNames(t *testing.T) {
	long := strings.Repeat("é", 5000) // 10,000 bytes
	for _, tc := range []struct {
		name                    string
		tenant, agent, taskType string
		want                    event.Names
	}{
		{name: "valid", tenant: "acme", agent: "planner", taskType: "research.deep",
			want: event.Names{Tenant: "acme", Agent: "planner", TaskType: "research.deep"}},
		{name: "no agent or task type", tenant: "acme",
			want: event.Names{Tenant: "acme"}},
		{name: "path-shaped tenant is valid", tenant: "../entries/x/discard?", agent: "a",
			want: event.Names{Tenant: "../entries/x/discard?", Agent: "a"}},
		{name: "bidi tenant", tenant: "acme\u202e", agent: "planner",
			want: event.Names{Tenant: event.ReservedTenant, Agent: "planner", Invalid: []event.InvalidName{
				{Field: "tenant", Value: "acme\u202e", Size: 7, Problem: `tenant "acme\u202e" holds the invisible or control character U+202E`}}}},
		{name: "tenant not UTF-8", tenant: "a\xff",
			want: event.Names{Tenant: event.ReservedTenant, Invalid: []event.InvalidName{
				{Field: "tenant", Value: event.EncodeHeader("a\xff"), Size: 2, Problem: `tenant "a\xff" is not UTF-8`}}}},
		{name: "forged reserved tenant", tenant: event.ReservedTenant,
			want: event.Names{Tenant: event.ReservedTenant, Invalid: []event.InvalidName{
				{Field: "tenant", Value: event.ReservedTenant, Size: 9, Problem: `tenant "(invalid)" begins with "(", which marks jsdlq's own names`}}}},
		{name: "bad agent moves a valid tenant", tenant: "acme", agent: "x\ny", taskType: "t",
			want: event.Names{Tenant: event.ReservedTenant, TaskType: "t", Invalid: []event.InvalidName{
				{Field: "agent", Value: "x\ny", Size: 3, Problem: `agent "x\ny" holds the invisible or control character U+000A`}}}},
		// The counters' key of the entries that name no agent: an agent
		// named so would be counted, and spared its alerts, with them.
		{name: "agent named like no agent", tenant: "acme", agent: "(none)", taskType: "t",
			want: event.Names{Tenant: event.ReservedTenant, TaskType: "t", Invalid: []event.InvalidName{
				{Field: "agent", Value: "(none)", Size: 6, Problem: `agent "(none)" is the name jsdlq's counters give the entries that name no agent`}}}},
		{name: "long task type kept bounded", tenant: "acme", taskType: long,
			want: event.Names{Tenant: event.ReservedTenant, Invalid: []event.InvalidName{
				{Field: "task_type", Value: long[:event.KeptNameBytes], Size: 10000, Problem: "task type of 10000 bytes, more than 256"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := event.CheckNames(tc.tenant, tc.agent, tc.taskType)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CheckNames(%q, %q, %q) (-want +got):\n%s", tc.tenant, tc.agent, tc.taskType, diff)
			}
		})
	}
}

func TestConventionsNames(t *testing.T) {
	c := event.DefaultConventions
	for _, tc := range []struct {
		name         string
		subject      string
		h            map[string][]string
		failureAgent string
		want         event.Names
	}{
		{name: "headers", subject: "agents.a.tasks.t", h: map[string][]string{"X-Tenant-ID": {" acme "}, "X-Agent": {"b"}},
			want: event.Names{Tenant: "acme", Agent: "b", TaskType: "t"}},
		{name: "subject and default tenant", subject: "agents.a.tasks.t.u",
			want: event.Names{Tenant: event.DefaultTenant, Agent: "a", TaskType: "t.u"}},
		{name: "failure agent", failureAgent: "f",
			want: event.Names{Tenant: event.DefaultTenant, Agent: "f"}},
		{name: "1,600-byte tenant", h: map[string][]string{"X-Tenant-ID": {strings.Repeat("t", 1600)}},
			want: event.Names{Tenant: event.ReservedTenant, Invalid: []event.InvalidName{
				{Field: "tenant", Value: strings.Repeat("t", event.KeptNameBytes), Size: 1600, Problem: "tenant of 1600 bytes, more than 256"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Names(tc.subject, tc.h, tc.failureAgent)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Names(%q, %v, %q) (-want +got):\n%s", tc.subject, tc.h, tc.failureAgent, diff)
			}
		})
	}
}
