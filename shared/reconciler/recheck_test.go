package reconciler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// A replayed entry whose task has not completed is not read by every run:
// its next check is put off by as long as it has waited (at least a
// quarter hour, at most a day, inside the 72 hours a completion record is
// kept), the runs before then do not read it, and once due it is read and
// recovered if its task completed meanwhile. A dry run puts nothing off.
func TestReplayedEntriesCheckedWhenDue(t *testing.T) {
	f := newFixture(t, false)
	start := time.Now().UTC().Truncate(time.Second)
	clock := start
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, func() time.Time { return clock })
	cases := []struct {
		name   string
		waited time.Duration // since it was marked replayed
		want   time.Duration // next check, after start
	}{
		{"just replayed", 2 * time.Minute, 15 * time.Minute},
		{"an hour ago", time.Hour, time.Hour},
		{"three days ago", 72 * time.Hour, 24 * time.Hour},
	}
	ids := map[string]string{}
	keys := map[string]string{}
	for i, tc := range cases {
		at := f.storeAt(start.Add(-tc.waited))
		e := f.seed(at, entry(uint64(i+1), "acme", store.Scheduled))
		f.move(at, e.ID, store.Scheduled, store.Replaying, "replay")
		f.move(at, e.ID, store.Replaying, store.Replayed, "replay")
		ids[tc.name], keys[tc.name] = e.ID, e.IdempotencyKey
	}
	nextChecks := func() map[string]time.Duration {
		out := map[string]time.Duration{}
		for _, tc := range cases {
			out[tc.name] = f.get(ids[tc.name]).NextRetryAt.Sub(start)
		}
		return out
	}
	before := nextChecks()

	rep := f.run(h, true)
	if diff := cmp.Diff(before, nextChecks()); diff != "" {
		t.Errorf("a dry run moved next checks (-before +after):\n%s", diff)
	}
	if got := section(t, rep, reconciler.SectionReplayed).Counts["rechecks_deferred"]; got != 0 {
		t.Errorf("dry run rechecks_deferred = %d, want 0", got)
	}

	rep = f.run(h, false)
	want := map[string]time.Duration{}
	for _, tc := range cases {
		want[tc.name] = tc.want
	}
	if diff := cmp.Diff(want, nextChecks()); diff != "" {
		t.Errorf("next checks after the first run (-want +got):\n%s", diff)
	}
	if c := section(t, rep, reconciler.SectionReplayed).Counts; c["replayed"] != 3 || c["rechecks_deferred"] != 3 {
		t.Errorf("first run counts = %v, want 3 replayed entries read, 3 rechecks deferred", c)
	}

	// The tasks complete now; the runs before each entry's check is due
	// neither read it nor see its completion.
	for _, tc := range cases {
		f.complete(keys[tc.name])
	}
	clock = start.Add(10 * time.Minute)
	if c := section(t, f.run(h, false), reconciler.SectionReplayed).Counts; c["replayed"] != 0 {
		t.Errorf("run before any check is due: counts = %v, want no replayed entry read", c)
	}
	for _, step := range []struct {
		at        time.Duration
		recovered []string
	}{
		{16 * time.Minute, []string{"just replayed"}},
		{61 * time.Minute, []string{"just replayed", "an hour ago"}},
		{23 * time.Hour, []string{"just replayed", "an hour ago"}},
		{24*time.Hour + time.Minute, []string{"just replayed", "an hour ago", "three days ago"}},
	} {
		clock = start.Add(step.at)
		rep := f.run(h, false)
		for _, tc := range cases {
			wantSt := store.Replayed
			for _, name := range step.recovered {
				if name == tc.name {
					wantSt = store.Recovered
				}
			}
			if got := f.get(ids[tc.name]).Status; got != wantSt {
				t.Errorf("at +%s: %s = %s, want %s (%s)", step.at, tc.name, got, wantSt, summary(rep))
			}
		}
	}
}
