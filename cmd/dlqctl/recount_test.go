package main

import (
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// audit --recount: a counter written outside the transactions makes its
// hour disagree; the dry run names it and changes nothing, the recount
// rewrites it (one progress line per hour), the next recount finds every
// hour in agreement. A budget too small for one hour stops at once, exit
// 5, and says where to continue; recount flags without --recount are a
// usage error.
func TestAuditRecount(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	e.seed(seed{id: "TASKS.1", tenant: "acme", agent: "backend", category: "permanent", reason: "impossible_task", status: store.Escalated},
		seed{id: "TASKS.2", tenant: "globex", agent: "cto", category: "poison", reason: "parse_error", status: store.Quarantined})
	stray := store.Metrics{Total: 1, ByTenant: map[string]int64{"acme": 1}}
	if err := e.st.AddMetrics(ctx, time.Now(), "stray", stray); err != nil {
		t.Fatal(err)
	}
	hour := store.Hour(time.Now())
	tests := []struct {
		args       []string
		code       int
		out, lines string
	}{
		{[]string{"audit", "--recount", "--since", "2h", "--dry-run"}, 0, "1 disagreed, 0 rewritten", "recount " + hour + ": 2 entries, disagrees"},
		{[]string{"audit", "--recount", "--since", "2h"}, 0, "1 disagreed, 1 rewritten", "recount " + hour + ": 2 entries, disagreed (total 3, entries 2): rewritten"},
		{[]string{"audit", "--recount", "--since", "2h"}, 0, "0 disagreed, 0 rewritten", "recount " + hour + ": 2 entries, agrees"},
		{[]string{"audit", "--recount", "--budget", "1ns"}, exitPartial, "0 hours", ""},
		{[]string{"audit", "--since", "2h"}, exitUsage, "", ""},
		{[]string{"audit", "--recount", "--since", "tomorrow"}, exitUsage, "", ""},
	}
	for _, tc := range tests {
		code, out, stderr := e.run(nil, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(stderr, tc.lines) {
			t.Errorf("dlqctl %s = %d\n%s\n%s\nwant exit %d, %q and %q", strings.Join(tc.args, " "), code, out, stderr, tc.code, tc.out, tc.lines)
		}
	}
	if code, _, stderr := e.run(nil, "audit", "--recount", "--budget", "1ns"); code != exitPartial || !strings.Contains(stderr, "continue with --since") {
		t.Errorf("recount out of budget = %d %q, want exit %d naming where to continue", code, stderr, exitPartial)
	}
	m, err := e.st.ReadMetrics(ctx, hour)
	if err != nil || m.Total != 2 || m.ByTenant["acme"] != 1 || m.Tenants["acme"].InStatus(store.Escalated) != 1 {
		t.Errorf("hour after the recount = %+v, %v; want the 2 entries", m, err)
	}
}
