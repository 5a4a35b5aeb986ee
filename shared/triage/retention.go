package triage

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Retention bounds: an entry is kept at least an hour (time to look at it)
// and at most ten years.
const (
	DefaultRetention = 30 * 24 * time.Hour
	MinRetention     = time.Hour
	MaxRetention     = 3650 * 24 * time.Hour
)

// retention is the policy's compiled defaults.retention*.
type retention struct {
	def      time.Duration
	byAgent  map[string]time.Duration
	byTenant map[string]time.Duration
}

// retentionRE is a retention in days and hours: "30d", "12h", "1d12h".
var retentionRE = regexp.MustCompile(`^(?:(\d{1,5})d)?(?:(\d{1,6})h)?$`)

// ParseRetention reads a retention written in days and hours ("180d",
// "36h", "1d12h") and checks it is within [MinRetention, MaxRetention].
func ParseRetention(s string) (time.Duration, error) {
	m := retentionRE.FindStringSubmatch(s)
	if m == nil || s == "" {
		return 0, fmt.Errorf("%q is not a retention (days and hours, for example 30d, 12h or 1d12h)", s)
	}
	var r time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour} {
		if n, err := strconv.Atoi(m[i+1]); err == nil {
			r += time.Duration(n) * unit
		}
	}
	if r < MinRetention || r > MaxRetention {
		return 0, fmt.Errorf("%q is not between 1h and 3650d", s)
	}
	return r, nil
}

func checkRetention(v *validator, where, s string) time.Duration {
	r, err := ParseRetention(s)
	if err != nil {
		v.add(where, "%v", err)
	}
	return r
}

func compileRetention(v *validator, d defaults) retention {
	out := retention{def: DefaultRetention, byAgent: map[string]time.Duration{}, byTenant: map[string]time.Duration{}}
	if d.Retention != "" {
		if r := checkRetention(v, "defaults.retention", d.Retention); r > 0 {
			out.def = r
		}
	}
	for _, a := range slices.Sorted(maps.Keys(d.RetentionByAgent)) {
		out.byAgent[a] = checkRetention(v, "defaults.retention_by_agent."+a, d.RetentionByAgent[a])
	}
	for _, t := range slices.Sorted(maps.Keys(d.RetentionByTenant)) {
		out.byTenant[t] = checkRetention(v, "defaults.retention_by_tenant."+t, d.RetentionByTenant[t])
	}
	return out
}

// retentionFor is the one precedence of retention: the matched rule's own,
// else the agent's default, else the tenant's, else defaults.retention.
func (p *Policy) retentionFor(r rule, in Input) time.Duration {
	if r.retention > 0 {
		return r.retention
	}
	if x, ok := p.retention.byAgent[in.Agent]; ok && in.Agent != "" {
		return x
	}
	if x, ok := p.retention.byTenant[in.Tenant]; ok && in.Tenant != "" {
		return x
	}
	return p.retention.def
}

// FormatRetention writes a retention the way policies do: "180d", "36h"
// as "1d12h", "12h"; below an hour it is the Go duration.
func FormatRetention(r time.Duration) string {
	if r < time.Hour || r%time.Hour != 0 {
		return r.String()
	}
	days, hours := r/(24*time.Hour), (r%(24*time.Hour))/time.Hour
	switch {
	case hours == 0:
		return fmt.Sprintf("%dd", days)
	case days == 0:
		return fmt.Sprintf("%dh", hours)
	}
	return fmt.Sprintf("%dd%dh", days, hours)
}
