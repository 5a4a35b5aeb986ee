package triage

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// memorySource is an OverrideSource in memory: the stored document, or an
// error reading it. The store's own source is tested against Firestore in
// shared/store (TestPolicyLoaderOverride).
type memorySource struct {
	doc   []byte
	found bool
	err   error
	reads int
}

func (m *memorySource) PolicyOverrideYAML(context.Context) ([]byte, bool, error) {
	m.reads++
	return m.doc, m.found, m.err
}

// save stores doc as written and returns its version (doc must parse).
func (m *memorySource) save(t *testing.T, doc string) string {
	t.Helper()
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse(override) = %v", err)
	}
	m.doc, m.found, m.err = []byte(doc), true, nil
	return p.Version()
}

// A broken or unreadable override never replaces a working policy: the
// previous one stays in force, the rejection is logged once per document,
// LastError says why; removing the override returns to the default.
func TestLoaderOverride(t *testing.T) {
	src := &memorySource{}
	ctx := testenv.Context(t)
	var logs bytes.Buffer
	l := NewLoader(src, obs.NewLogger(&logs), WithRefresh(0))

	if got, want := l.Current(ctx).Version(), Default().Version(); got != want {
		t.Fatalf("Current() without override = %s, want default %s", got, want)
	}
	good := strings.Replace(string(defaultYAML), "escalation_target: ceo", "escalation_target: oncall", 1)
	v := src.save(t, good)
	if p := l.Current(ctx); p.Version() != v || p.EscalationTarget() != "oncall" {
		t.Fatalf("Current() = %s (target %s), want override %s (target oncall)", p.Version(), p.EscalationTarget(), v)
	}

	bad := strings.Replace(good, "strategy: hallucination_loop\n", "strategy: {delay: {base: 0s}, max_replays: 1}\n", 1)
	src.doc = []byte(bad)
	for range 3 {
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

	src.err = errors.New("firestore unavailable")
	if got := l.Current(ctx).Version(); got != v {
		t.Errorf("Current() with the override unreadable = %s, want previous %s", got, v)
	}
	if err := l.LastError(); err == nil || !strings.Contains(err.Error(), "firestore unavailable") {
		t.Errorf("LastError() = %v, want the read error", err)
	}

	src.doc, src.found, src.err = nil, false, nil
	if got, want := l.Current(ctx).Version(), Default().Version(); got != want {
		t.Errorf("Current() after delete = %s, want default %s", got, want)
	}
	if err := l.LastError(); err != nil {
		t.Errorf("LastError() = %v, want nil", err)
	}
}

// Without a source the loader is the default and reads nothing.
func TestLoaderWithoutSource(t *testing.T) {
	l := NewLoader(nil, obs.Discard(), WithRefresh(0))
	if got, want := l.Current(testenv.Context(t)).Version(), Default().Version(); got != want {
		t.Errorf("NewLoader(nil).Current() = %s, want default %s", got, want)
	}
}

func TestLoaderRefreshInterval(t *testing.T) {
	src := &memorySource{}
	ctx := testenv.Context(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLoader(src, obs.Discard(), WithClock(func() time.Time { return now }))
	def := l.Current(ctx).Version()
	good := strings.Replace(string(defaultYAML), "jitter: 0.2", "jitter: 0.1", 1)
	v := src.save(t, good)
	// Within the refresh interval the cached policy is used (no read).
	now = now.Add(DefaultRefresh / 2)
	if got := l.Current(ctx).Version(); got != def {
		t.Errorf("Current() within the interval = %s, want cached %s", got, def)
	}
	now = now.Add(DefaultRefresh)
	if got := l.Current(ctx).Version(); got != v {
		t.Errorf("Current() after the interval = %s, want %s", got, v)
	}
	if src.reads != 2 {
		t.Errorf("override read %d times over two intervals, want 2", src.reads)
	}
}
