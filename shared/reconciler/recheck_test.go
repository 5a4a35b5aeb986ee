package reconciler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// A replayed entry whose task has not completed is not read by every run:
// its next check is put off by as long as it has waited (at least a
// quarter hour, at most a day, inside the 72 hours a completion record is
// kept), the runs before then do not read it, and once due it is read and
// recovered if its task completed meanwhile. One without an idempotency
// key, whose completion nothing can show, is looked at once and then put
// off past its expiry. A dry run puts nothing off.
func TestReplayedEntriesCheckedWhenDue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	start := time.Now().UTC().Truncate(time.Second)
	clock := start
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, func() time.Time { return clock })
	cases := []struct {
		name   string
		waited time.Duration // since it was marked replayed
		want   time.Duration // next check, after start; 0: never (past its expiry)
	}{
		{"just replayed", 2 * time.Minute, 15 * time.Minute},
		{"an hour ago", time.Hour, time.Hour},
		{"three days ago", 72 * time.Hour, 24 * time.Hour},
		{"without a key", 2 * time.Minute, 0},
	}
	ids := map[string]string{}
	keys := map[string]string{}
	for i, tc := range cases {
		at := f.storeAt(start.Add(-tc.waited))
		in := entry(uint64(i+1), "acme", store.Scheduled)
		if tc.want == 0 {
			in.IdempotencyKey, in.TaskID = "", ""
		}
		e := f.seed(at, in)
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
		if tc.want == 0 {
			want[tc.name] = f.get(ids[tc.name]).ExpireAt.Add(3 * 24 * time.Hour).Sub(start)
		}
	}
	if diff := cmp.Diff(want, nextChecks()); diff != "" {
		t.Errorf("next checks after the first run (-want +got):\n%s", diff)
	}
	if c := section(t, rep, reconciler.SectionReplayed).Counts; c["replayed"] != 4 || c["rechecks_deferred"] != 4 || c["without_idempotency_key"] != 1 {
		t.Errorf("first run counts = %v, want 4 replayed entries read, 4 rechecks deferred, 1 without a key", c)
	}

	// The tasks complete now; the runs before each entry's check is due
	// neither read it nor see its completion.
	for _, tc := range cases {
		if keys[tc.name] != "" {
			f.complete("acme", keys[tc.name])
		}
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

// A replayed entry whose replay died again is not checked by the runs: a
// new entry carries its task on, and the parent's check went to that chain
// (store.ChainCheckMargin before it expires). When the new entry's check
// finds the task completed, the run recovers both, having read only the new
// entry.
func TestReplayDeathLeavesTheCheckToTheChain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	start := time.Now().UTC().Truncate(time.Second)
	clock := start
	h := f.handler(reconciler.Config{TimeBudget: time.Minute}, func() time.Time { return clock })

	at := f.storeAt(start.Add(-time.Hour))
	parent := f.seed(at, entry(1, "acme", store.Scheduled))
	f.move(at, parent.ID, store.Scheduled, store.Replaying, "replay")
	f.move(at, parent.ID, store.Replaying, store.Replayed, "replay")
	// The replay dies; classify records the death linked to the parent.
	at = f.storeAt(start.Add(-30 * time.Minute))
	death := entry(2, "acme", store.Scheduled)
	death.IdempotencyKey = parent.IdempotencyKey
	if _, unlinked, err := at.LinkReplay(f.ctx, death, map[string][]string{event.HeaderReplayOf: {parent.EventID}}); err != nil || unlinked != "" {
		t.Fatalf("LinkReplay() = %q, %v; want linked", unlinked, err)
	}
	child := f.seed(at, death)
	f.move(at, child.ID, store.Scheduled, store.Replaying, "replay")
	f.move(at, child.ID, store.Replaying, store.Replayed, "replay")

	rep := f.run(h, false)
	if c := section(t, rep, reconciler.SectionReplayed).Counts; c["replayed"] != 1 || c["rechecks_deferred"] != 1 {
		t.Errorf("first run counts = %v, want only the new entry read and deferred", c)
	}
	f.complete(parent.Tenant, parent.IdempotencyKey)
	for _, step := range []struct {
		at     time.Duration
		status store.Status
	}{
		{10 * time.Minute, store.Replayed}, // the new entry's check is not due
		{31 * time.Minute, store.Recovered},
	} {
		clock = start.Add(step.at)
		rep := f.run(h, false)
		got := map[string]store.Status{"parent": f.get(parent.ID).Status, "new entry": f.get(child.ID).Status}
		want := map[string]store.Status{"parent": step.status, "new entry": step.status}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("at +%s (-want +got):\n%s\n%s", step.at, diff, summary(rep))
		}
		if c := section(t, rep, reconciler.SectionReplayed).Counts; c["replayed"] > 1 {
			t.Errorf("at +%s: counts = %v, want the parent never read", step.at, c)
		}
	}
}
