package triage

import (
	"maps"
	"slices"
)

// alertsDoc is the policy's alerts: section: thresholds of the alerts
// reconcile raises from the hourly metrics. 0 switches an alert off.
type alertsDoc struct {
	// AgentDeadPerHour: more than this many dead tasks of one agent within
	// one clock hour raise agent_dead_per_hour for that agent.
	AgentDeadPerHour int `yaml:"agent_dead_per_hour"`
}

// agentAlertDoc is one agent's entry of alerts_by_agent:.
type agentAlertDoc struct {
	// DeadPerHour overrides alerts.agent_dead_per_hour for the agent;
	// 0 switches the alert off for it. Required, so that an entry without
	// it is an error rather than a silent "off".
	DeadPerHour *int `yaml:"dead_per_hour"`
}

// agentAlerts is the compiled alerts: and alerts_by_agent: sections.
type agentAlerts struct {
	deadPerHour int
	byAgent     map[string]int
}

func compileAgentAlerts(v *validator, d *document) agentAlerts {
	out := agentAlerts{byAgent: map[string]int{}}
	if d.Alerts != nil {
		out.deadPerHour = d.Alerts.AgentDeadPerHour
		if out.deadPerHour < 0 {
			v.add("alerts.agent_dead_per_hour", "%d is negative (0 switches the alert off)", out.deadPerHour)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(d.AlertsByAgent)) {
		where := "alerts_by_agent." + a
		n := d.AlertsByAgent[a].DeadPerHour
		switch {
		case a == "":
			v.add("alerts_by_agent", "an agent name is required")
		case n == nil:
			v.add(where+".dead_per_hour", "required (0 switches the alert off for the agent)")
		case *n < 0:
			v.add(where+".dead_per_hour", "%d is negative (0 switches the alert off for the agent)", *n)
		default:
			out.byAgent[a] = *n
		}
	}
	return out
}

// AgentDeadPerHour is the agent_dead_per_hour alert's threshold for agent:
// its alerts_by_agent entry, else alerts.agent_dead_per_hour. The alert
// fires when the agent has more dead tasks than this within one clock
// hour; 0 means the alert is off for the agent.
func (p *Policy) AgentDeadPerHour(agent string) int {
	if n, ok := p.agentAlerts.byAgent[agent]; ok {
		return n
	}
	return p.agentAlerts.deadPerHour
}
