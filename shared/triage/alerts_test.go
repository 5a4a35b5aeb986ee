package triage

import (
	"strings"
	"testing"
)

// alertsPolicy is the default policy with its alerts: section replaced.
func alertsPolicy(section string) (*Policy, error) {
	doc := strings.Replace(string(defaultYAML), "alerts:\n  agent_dead_per_hour: 50\n", section, 1)
	return Parse([]byte(doc))
}

func TestAgentDeadPerHour(t *testing.T) {
	tests := []struct {
		name    string
		section string
		want    map[string]int // agent -> threshold
	}{
		{name: "default policy", section: "alerts:\n  agent_dead_per_hour: 50\n",
			want: map[string]int{"devops": 50, "marketing": 50, "": 50}},
		{name: "no section: off", section: "",
			want: map[string]int{"devops": 0, "marketing": 0}},
		{name: "zero: off", section: "alerts: {agent_dead_per_hour: 0}\n",
			want: map[string]int{"devops": 0}},
		{name: "overrides raise, lower and switch off",
			section: "alerts: {agent_dead_per_hour: 20}\nalerts_by_agent:\n  devops: {dead_per_hour: 50}\n  marketing: {dead_per_hour: 5}\n  cso: {dead_per_hour: 0}\n",
			want:    map[string]int{"devops": 50, "marketing": 5, "cso": 0, "backend": 20}},
		{name: "override without a default",
			section: "alerts_by_agent:\n  marketing: {dead_per_hour: 5}\n",
			want:    map[string]int{"marketing": 5, "devops": 0}},
	}
	for _, tc := range tests {
		p, err := alertsPolicy(tc.section)
		if err != nil {
			t.Fatalf("%s: Parse = %v", tc.name, err)
		}
		for agent, want := range tc.want {
			if got := p.AgentDeadPerHour(agent); got != want {
				t.Errorf("%s: AgentDeadPerHour(%q) = %d, want %d", tc.name, agent, got, want)
			}
		}
	}
}

func TestAgentAlertsInvalid(t *testing.T) {
	tests := []struct {
		name    string
		section string
		want    []string // substrings of the error
	}{
		{name: "negative default", section: "alerts: {agent_dead_per_hour: -1}\n",
			want: []string{"alerts.agent_dead_per_hour: -1 is negative"}},
		{name: "negative override", section: "alerts_by_agent:\n  devops: {dead_per_hour: -5}\n",
			want: []string{"alerts_by_agent.devops.dead_per_hour: -5 is negative"}},
		{name: "override without its threshold", section: "alerts_by_agent:\n  devops: {}\n",
			want: []string{"alerts_by_agent.devops.dead_per_hour: required"}},
		{name: "every problem at once",
			section: "alerts: {agent_dead_per_hour: -2}\nalerts_by_agent:\n  devops: {dead_per_hour: -5}\n  marketing: {}\n",
			want:    []string{"agent_dead_per_hour: -2", "devops.dead_per_hour: -5", "marketing.dead_per_hour: required"}},
		{name: "unknown key in alerts", section: "alerts: {agent_dead_per_day: 5}\n",
			want: []string{"field agent_dead_per_day not found"}},
		{name: "unknown key in an override", section: "alerts_by_agent:\n  devops: {dead_per_day: 5}\n",
			want: []string{"field dead_per_day not found"}},
		{name: "not a number", section: "alerts: {agent_dead_per_hour: many}\n",
			want: []string{"cannot unmarshal"}},
	}
	for _, tc := range tests {
		_, err := alertsPolicy(tc.section)
		wantInvalid(t, tc.name, err, tc.want)
	}
}

// The thresholds are part of the policy's content: changing one changes
// its version, like every other field of the policy.
func TestAgentAlertsVersion(t *testing.T) {
	a, errA := alertsPolicy("alerts: {agent_dead_per_hour: 50}\n")
	b, errB := alertsPolicy("alerts: {agent_dead_per_hour: 51}\n")
	if errA != nil || errB != nil {
		t.Fatalf("Parse = %v, %v", errA, errB)
	}
	if a.Version() == b.Version() {
		t.Errorf("Version() = %s for thresholds 50 and 51, want different versions", a.Version())
	}
}
