package reconciler_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// fixedPolicy is a policy source that always answers one policy.
type fixedPolicy struct{ p *triage.Policy }

func (f fixedPolicy) Current(context.Context) *triage.Policy { return f.p }

// alertPolicy is the default policy with the given alerts sections
// instead of its own.
func alertPolicy(t *testing.T, sections string) *triage.Policy {
	t.Helper()
	doc := strings.Replace(string(triage.DefaultYAML()), "alerts:\n  agent_dead_per_hour: 50\n", sections, 1)
	p, err := triage.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("triage.Parse(%q) = %v", sections, err)
	}
	return p
}

// seedDead records n dead tasks of agent, escalated (no replay task), with
// st's clock.
func (f *fixture) seedDead(st *store.Store, seq *uint64, agent string, n int) {
	f.t.Helper()
	for range n {
		*seq++
		e := entry(*seq, "acme", store.Escalated)
		e.Agent, e.Subject = agent, "agents."+agent+".tasks.implementation"
		f.seed(st, e)
	}
}

// agentAlerts are the report's agent_dead_per_hour findings as agent ->
// "dead/threshold".
func agentAlerts(t *testing.T, rep *audit.Report) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, fd := range findings(rep, audit.AlertAgentDeadPerHour) {
		if !fd.Alert || fd.Tenant != "" || fd.Agent == "" || fd.Section != reconciler.SectionEntries {
			t.Errorf("finding %+v, want a pipeline alert of the entries section naming its agent", fd)
		}
		out[fd.Agent] = fmt.Sprintf("%v/%v", fd.Value, fd.Threshold)
	}
	return out
}

// The per-agent dead-task alert counts each agent's dead tasks within one
// of the clock hours overlapping the last hour, from the hourly metrics,
// against the threshold the policy in force sets for the agent.
func TestAgentDeadPerHourAlert(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	now := time.Now().UTC()
	seq := uint64(1000)
	recent := f.storeAt(now.Add(-time.Minute))
	f.seedDead(recent, &seq, "below", 2)
	f.seedDead(recent, &seq, "at", 3)
	f.seedDead(recent, &seq, "above", 4)
	f.seedDead(recent, &seq, "devops", 4)
	f.seedDead(recent, &seq, "marketing", 2)
	// The previous clock hour counts; the hours before it do not.
	f.seedDead(f.storeAt(now.Truncate(time.Hour).Add(-30*time.Minute)), &seq, "lasthour", 4)
	f.seedDead(f.storeAt(now.Add(-3*time.Hour)), &seq, "old", 6)

	tests := []struct {
		name     string
		sections string
		want     map[string]string // agent -> dead/threshold
	}{
		{name: "default threshold: below and at stay quiet, above alerts",
			sections: "alerts: {agent_dead_per_hour: 3}\n",
			want:     map[string]string{"above": "4/3", "devops": "4/3", "lasthour": "4/3"}},
		{name: "an override raises devops' threshold and lowers marketing's",
			sections: "alerts: {agent_dead_per_hour: 3}\nalerts_by_agent:\n  devops: {dead_per_hour: 50}\n  marketing: {dead_per_hour: 1}\n",
			want:     map[string]string{"above": "4/3", "marketing": "2/1", "lasthour": "4/3"}},
		{name: "an override switches one agent off",
			sections: "alerts: {agent_dead_per_hour: 3}\nalerts_by_agent:\n  above: {dead_per_hour: 0}\n",
			want:     map[string]string{"devops": "4/3", "lasthour": "4/3"}},
		{name: "off by default, on for one agent",
			sections: "alerts: {agent_dead_per_hour: 0}\nalerts_by_agent:\n  devops: {dead_per_hour: 2}\n",
			want:     map[string]string{"devops": "4/2"}},
		{name: "off", sections: "alerts: {agent_dead_per_hour: 0}\n", want: map[string]string{}},
		{name: "no alerts section: off", sections: "", want: map[string]string{}},
	}
	var reads []int64
	for _, tc := range tests {
		h := reconciler.New(reconciler.Config{TimeBudget: time.Minute}, reconciler.Deps{
			Logger: obs.NewLogger(f.logs), Store: f.st, Tasks: f.sched, Policy: fixedPolicy{alertPolicy(t, tc.sections)},
			Now: func() time.Time { return now },
		})
		f.logs.reset()
		before := f.st.Ops().Reads
		rep := f.run(h, true)
		reads = append(reads, f.st.Ops().Reads-before)
		if d := cmp.Diff(tc.want, agentAlerts(t, rep)); d != "" {
			t.Errorf("%s: agent alerts (-want +got):\n%s", tc.name, d)
		}
		// Each logged once as an ERROR entry with jsonPayload.alert.
		var logged int
		for _, a := range f.logs.alerts(t) {
			if a == audit.AlertAgentDeadPerHour {
				logged++
			}
		}
		if logged != len(tc.want) {
			t.Errorf("%s: %d %s log entries, want %d", tc.name, logged, audit.AlertAgentDeadPerHour, len(tc.want))
		}
	}
	// The alert reads nothing of its own: the counts come from the hourly
	// metrics the entries section reads anyway, so a run reads the same
	// documents whichever thresholds are set and however many agents alert.
	if slices.Min(reads) != slices.Max(reads) {
		t.Errorf("store reads per run = %v, want the same for every policy", reads)
	}
}

// agentTopic records the alert notifications of the per-agent alert as
// "<kind> <agent>", sorted.
type agentTopic struct {
	mu  sync.Mutex
	got []string
}

func (t *agentTopic) Publish(_ context.Context, data []byte, attrs map[string]string) error {
	n, err := event.DecodeNotification(data)
	if err != nil {
		return err
	}
	if n.AlertName != audit.AlertAgentDeadPerHour {
		return nil
	}
	_, after, _ := strings.Cut(n.Summary, "for agent ")
	agent, _, _ := strings.Cut(after, " ")
	t.mu.Lock()
	defer t.mu.Unlock()
	t.got = append(t.got, attrs[event.AttrKind]+" "+agent)
	return nil
}

func (t *agentTopic) published() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	// One flush publishes in no set order.
	return slices.Sorted(slices.Values(t.got))
}

// Each agent's alert is raised once while it lasts and cleared once after,
// under the policy in force (here the Firestore override, read through
// the store's policy loader as classify and replay read it).
func TestAgentDeadPerHourRaisedOnceClearedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	if _, err := f.st.SavePolicyOverride(f.ctx, []byte(strings.Replace(string(triage.DefaultYAML()),
		"alerts:\n  agent_dead_per_hour: 50\n", "alerts: {agent_dead_per_hour: 3}\n", 1))); err != nil {
		t.Fatalf("SavePolicyOverride = %v", err)
	}
	now := time.Now().UTC()
	clock := now
	tp := &agentTopic{}
	h := reconciler.New(reconciler.Config{TimeBudget: time.Minute}, reconciler.Deps{
		Logger: obs.NewLogger(f.logs), Store: f.st, Tasks: f.sched, Notify: notify.New(f.st, tp),
		Now: func() time.Time { return clock },
	})
	seq := uint64(2000)
	recent := f.storeAt(now.Add(-time.Minute))
	var last *audit.Report
	steps := []struct {
		name  string
		setup func()
		at    time.Time
		want  []string // alerted agents
		pub   []string // published so far
	}{
		{name: "devops above: raised", setup: func() { f.seedDead(recent, &seq, "devops", 4) },
			at: now, want: []string{"devops"}, pub: []string{"alert_raised devops"}},
		// The alert state (dlq-audits/_alerts) holds devops' alert as
		// active, so a later run that sees it again stages nothing.
		{name: "the same again: nothing new", at: now, want: []string{"devops"}, pub: []string{"alert_raised devops"}},
		// A retried save of the same report stages the same notification
		// ids or none (SaveAudit's transaction reads the state it wrote).
		{name: "the last report saved again: nothing new", setup: func() {
			if err := f.st.SaveAudit(f.ctx, last); err != nil {
				t.Fatalf("SaveAudit(again) = %v", err)
			}
		}, at: now, want: []string{"devops"}, pub: []string{"alert_raised devops"}},
		{name: "marketing crosses too: raised for marketing only", setup: func() { f.seedDead(recent, &seq, "marketing", 5) },
			at: now, want: []string{"devops", "marketing"}, pub: []string{"alert_raised devops", "alert_raised marketing"}},
		{name: "the hour has passed: both cleared", at: now.Add(3 * time.Hour),
			pub: []string{"alert_cleared devops", "alert_cleared marketing", "alert_raised devops", "alert_raised marketing"}},
		{name: "and stay cleared", at: now.Add(3 * time.Hour),
			pub: []string{"alert_cleared devops", "alert_cleared marketing", "alert_raised devops", "alert_raised marketing"}},
	}
	for _, st := range steps {
		if st.setup != nil {
			st.setup()
		}
		clock = st.at
		rep := f.run(h, false)
		if got := slices.Sorted(maps.Keys(agentAlerts(t, rep))); !slices.Equal(got, st.want) {
			t.Errorf("%s: agents alerted = %v, want %v", st.name, got, st.want)
		}
		if d := cmp.Diff(st.pub, tp.published()); d != "" {
			t.Errorf("%s: notifications published (-want +got):\n%s", st.name, d)
		}
		last = rep
	}
}
