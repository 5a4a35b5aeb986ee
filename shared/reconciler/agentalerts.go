package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/store"
)

// addAgents keeps, per agent, the most dead tasks it had within one of the
// clock hours that overlap the last hour (the current one and the one
// before). The hourly metrics count dead tasks by agent per clock hour
// only, so "within one clock hour" is what they can tell without reading
// entries: a burst is seen for the rest of its hour and the whole next one.
func (w *window) addAgents(h time.Time, m store.Metrics) {
	if h.Before(w.to.Truncate(time.Hour).Add(-time.Hour)) {
		return
	}
	if w.agents == nil {
		w.agents = map[string]int64{}
	}
	for agent, n := range m.ByAgent {
		// Entries without an agent (store.NoKey) have no agent to name.
		if agent != store.NoKey && agent != "" && n > w.agents[agent] {
			w.agents[agent] = n
		}
	}
}

// agentAlerts raises agent_dead_per_hour for each agent with more dead
// tasks within one clock hour than the policy in force allows it
// (triage.Policy.AgentDeadPerHour; 0 is off). It reads nothing itself: the
// counts come from the hourly metrics the entries section already read.
// Each agent's alert is its own (Finding.Agent keys it), so it is raised
// once while it lasts and cleared once when the hour has passed.
func (r *run) agentAlerts(ctx context.Context, w *window, sec *audit.Section) {
	if len(w.agents) == 0 || r.h.pol == nil {
		return
	}
	pol := r.h.pol.Current(ctx)
	if pol == nil {
		return
	}
	for _, agent := range slices.Sorted(maps.Keys(w.agents)) {
		n, limit := w.agents[agent], pol.AgentDeadPerHour(agent)
		if limit <= 0 || n <= int64(limit) {
			continue
		}
		f := r.finding(audit.AlertAgentDeadPerHour, SectionEntries, "",
			fmt.Sprintf("agent %s has %d dead tasks within one hour (more than %d, policy %s)", agent, n, limit, pol.Version()))
		f.Agent = agent
		f.Example(agent)
		f.Value, f.Threshold = float64(n), float64(limit)
		sec.Add("agents_over_threshold", 1)
	}
}
