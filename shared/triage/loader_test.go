package triage

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestLoaderOverride(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	var logs bytes.Buffer
	l := NewLoader(fs, obs.NewLogger(&logs), WithRefresh(0))

	// No override: the embedded default.
	if got, want := l.Current(ctx).Version(), Default().Version(); got != want {
		t.Fatalf("Current() without override = %s, want default %s", got, want)
	}

	good := strings.Replace(string(defaultYAML), "escalation_target: ceo", "escalation_target: oncall", 1)
	v, err := SaveOverride(ctx, fs, []byte(good))
	if err != nil {
		t.Fatalf("SaveOverride(good) = %v", err)
	}
	p := l.Current(ctx)
	if p.Version() != v || p.EscalationTarget() != "oncall" {
		t.Fatalf("Current() = %s (target %s), want override %s (target oncall)", p.Version(), p.EscalationTarget(), v)
	}

	// SaveOverride refuses an invalid document before it reaches Firestore.
	bad := strings.Replace(good, "strategy: hallucination_loop\n", "strategy: {delay: {base: 0s}, max_replays: 1}\n", 1)
	if _, err := SaveOverride(ctx, fs, []byte(bad)); err == nil || !strings.Contains(err.Error(), "rule 9 (name hallucination): strategy.delay.base") {
		t.Fatalf("SaveOverride(bad) = %v, want an error naming rule 9", err)
	}

	// An operator writing the document directly bypasses that check: the
	// loader rejects it, names the rule and keeps the previous policy.
	if _, err := fs.Collection(OverrideCollection).Doc(OverrideDoc).Set(ctx, map[string]any{OverrideField: bad}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if got := l.Current(ctx).Version(); got != v {
			t.Fatalf("Current() after a bad override = %s, want previous %s", got, v)
		}
	}
	if err := l.LastError(); err == nil || !strings.Contains(err.Error(), "rule 9 (name hallucination): strategy.delay.base") {
		t.Errorf("LastError() = %v, want the rule named", err)
	}
	if n := strings.Count(logs.String(), "override rejected"); n != 1 {
		t.Errorf("rejection logged %d times, want once per bad document:\n%s", n, logs.String())
	}

	// Removing the override returns to the default.
	if _, err := fs.Collection(OverrideCollection).Doc(OverrideDoc).Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := l.Current(ctx).Version(), Default().Version(); got != want {
		t.Errorf("Current() after delete = %s, want default %s", got, want)
	}
	if err := l.LastError(); err != nil {
		t.Errorf("LastError() = %v, want nil", err)
	}
}

func TestLoaderRefreshInterval(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	ctx := testenv.Context(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLoader(fs, obs.Discard(), WithClock(func() time.Time { return now }))
	def := l.Current(ctx).Version()
	good := strings.Replace(string(defaultYAML), "jitter: 0.2", "jitter: 0.1", 1)
	v, err := SaveOverride(ctx, fs, []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	// Within the refresh interval the cached policy is used (no read).
	now = now.Add(DefaultRefresh / 2)
	if got := l.Current(ctx).Version(); got != def {
		t.Errorf("Current() within the interval = %s, want cached %s", got, def)
	}
	now = now.Add(DefaultRefresh)
	if got := l.Current(ctx).Version(); got != v {
		t.Errorf("Current() after the interval = %s, want %s", got, v)
	}
}
