package replay_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/functions/replay"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// flushes counts the flushes of an outbox whose topic refuses everything.
type flushes struct {
	n int
	f *notify.Flusher
}

func (c *flushes) Flush(ctx context.Context) (notify.Result, error) {
	c.n++
	return c.f.Flush(ctx)
}

type downTopic struct{}

func (downTopic) Publish(context.Context, []byte, map[string]string) error {
	return errors.New("topic unreachable")
}

// Replay publishes the outbox right after a transition that staged a
// notification (an entry escalated for its missing payload), not after one
// that did not (a replay published). A publish that fails leaves the
// answer 200: the transition is committed, and a Cloud Tasks retry would
// only find the task spent; the notification waits for reconcile.
func TestFlushAfterTransition(t *testing.T) {
	e := setup(t)
	fl := &flushes{f: notify.New(e.store, downTopic{})}
	h := replay.New(replay.Config{}, replay.Deps{Logger: obs.NewLogger(e.logs), Store: e.store, Policy: e.policy, Publisher: e.js, Notify: fl})
	tests := []struct {
		spec    spec
		status  store.Status
		flushes int // after this entry, in all
	}{
		{spec{id: "TASKS.901"}, store.Replayed, 0},
		{spec{id: "TASKS.902", missing: true}, store.Escalated, 1},
	}
	for _, tt := range tests {
		en := e.newEntry(t, tt.spec)
		req := httptest.NewRequest(http.MethodPost, "/Replay", strings.NewReader(`{"entry_id":"`+en.ID+`","attempt":1}`))
		req.Header.Set(tasks.HeaderTaskName, tasks.Name(en.ID, 1))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("%s: status %d %s, want 200", en.ID, rec.Code, rec.Body)
		}
		if got, _ := e.store.GetMeta(e.ctx, en.ID); got.Status != tt.status {
			t.Errorf("%s: status = %s, want %s", en.ID, got.Status, tt.status)
		}
		if fl.n != tt.flushes {
			t.Errorf("%s: flushes = %d, want %d", en.ID, fl.n, tt.flushes)
		}
	}
	pending, err := e.store.ClaimNotifications(e.ctx, "reconcile", 60e9, 10)
	if err != nil || len(pending) != 1 || pending[0].Kind != "escalated" {
		t.Errorf("pending notifications = %+v, %v; want the escalation, left for reconcile", pending, err)
	}
	if n := len(e.logs.Lines("notifications not all published")); n != 1 {
		t.Errorf("warnings = %d, want 1", n)
	}
}

// A replay that meets its tenant's breaker as the half-open probe (here the
// breaker's cooldown is over, so admitting the replay moves it from open to
// half-open and stages breaker_half_open) publishes that notification at
// once too, not at the next reconcile run.
func TestFlushAfterBreakerProbe(t *testing.T) {
	e := setup(t)
	fl := &flushes{f: notify.New(e.store, downTopic{})}
	h := replay.New(replay.Config{}, replay.Deps{Logger: obs.NewLogger(e.logs), Store: e.store, Policy: e.policy, Publisher: e.js, Notify: fl})
	long := time.Now().Add(-2 * store.DefaultBreaker.Cooldown)
	e.breaker(t, store.Breaker{Tenant: tenant, State: store.BreakerOpen, OpenedAt: long, UpdatedAt: long})
	en := e.newEntry(t, spec{id: "TASKS.911"})
	req := httptest.NewRequest(http.MethodPost, "/Replay", strings.NewReader(`{"entry_id":"`+en.ID+`","attempt":1}`))
	req.Header.Set(tasks.HeaderTaskName, tasks.Name(en.ID, 1))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got, _ := e.store.GetMeta(e.ctx, en.ID); rec.Code != http.StatusOK || got.Status != store.Replayed || !got.BreakerProbe {
		t.Fatalf("probe replay = %d %s, entry %+v; want 200, replayed as the probe", rec.Code, rec.Body, got)
	}
	if fl.n != 1 {
		t.Errorf("flushes after the probe = %d, want 1", fl.n)
	}
	pending, err := e.store.ClaimNotifications(e.ctx, "reconcile", 60e9, 10)
	if err != nil || len(pending) != 1 || pending[0].Kind != string(jevent.NotifyBreakerHalfOpen) {
		t.Errorf("pending notifications = %+v, %v; want breaker_half_open (the topic is down)", pending, err)
	}
}
