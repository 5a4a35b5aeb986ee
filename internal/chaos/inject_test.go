package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/jsdlq/jsdlq/functions/classify"
	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// errInjected is the crash the scenario injects.
var errInjected = errors.New("chaos: injected crash")

// onceEach fails the first call per key, as a crash at that point would.
type onceEach struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (o *onceEach) fail(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[key] {
		return false
	}
	o.seen[key] = true
	return true
}

// crashingScheduler fails the first Schedule of each entry: classify's
// transaction has committed and the task does not exist, exactly the state
// a crash between the two leaves.
type crashingScheduler struct {
	next classify.Scheduler
	once *onceEach
}

func (c crashingScheduler) Schedule(ctx context.Context, r tasks.Request) (string, bool, error) {
	if c.once.fail(r.EntryID) {
		return "", false, errInjected
	}
	return c.next.Schedule(ctx, r)
}

// injected runs classify and replay in this process against the stack's
// Firestore emulator, Cloud Tasks emulator and nats-server, and makes each
// fail once per entry at its worst point: classify after its transaction
// and before the task exists (the redelivery Pub/Sub would make is a second
// Handle call), replay after the JetStream publish and before the status
// update (its publisher stores the message, then reports the crash; Cloud
// Tasks retries the task, dispatched with real OIDC tokens).
func (s *chaosStack) injected(t *testing.T, n int) result {
	ctx := context.Background()
	fs := s.fs
	st := store.New(fs)
	policy := triage.NewLoader(store.New(fs), obs.Discard())

	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	a, err := auth.New(config.Auth{Mode: config.AuthEmulator, Audience: srv.URL + "/Replay", AllowedEmails: []string{s.tasksSA()}}, s.addr["tasks"])
	if err != nil {
		t.Fatal(err)
	}
	replays := &onceEach{seen: map[string]bool{}}
	pub := testenv.CrashAfterPublish(s.js, func(m *nats.Msg) error {
		if replays.fail(m.Header.Get(event.HeaderReplayOf)) {
			return errInjected
		}
		return nil
	})
	h = a.Middleware(replay.New(replay.Config{}, replay.Deps{Logger: obs.Discard(), Store: st, Policy: policy, Publisher: pub}))
	sched := tasks.New(tasks.Config{Queue: s.queue, ReplayURL: srv.URL + "/Replay", ServiceAccount: s.tasksSA(), EmulatorHost: s.addr["tasks"]})
	t.Cleanup(func() { sched.Close() })
	classifies := &onceEach{seen: map[string]bool{}}
	c := classify.New(classify.Config{}, classify.Deps{Logger: obs.Discard(), Store: st, Policy: policy,
		Scheduler: crashingScheduler{next: sched, once: classifies}})

	b := s.originals("injected: classify fails after its transaction, replay after its publish (once per entry each)", n)
	stream, err := s.js.Stream(ctx, workStream)
	if err != nil {
		t.Fatal(err)
	}
	deliveries := 0
	for _, seq := range b.seqs {
		orig, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		ev := terminatedEvent(orig, seq, fmt.Sprint("inj-", seq), now)
		body, err := event.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		msg := ce.New()
		msg.SetID(fmt.Sprint("inj-msg-", seq))
		msg.SetSource("//pubsub.googleapis.com/projects/" + s.project + "/topics/" + topicID)
		msg.SetType("google.cloud.pubsub.topic.v1.messagePublished")
		if err := msg.SetData("application/json", map[string]any{
			"message":      map[string]any{"data": body, "attributes": ev.Attributes(), "messageId": msg.ID(), "publishTime": now},
			"subscription": "projects/" + s.project + "/subscriptions/classify-push",
		}); err != nil {
			t.Fatal(err)
		}
		// Pub/Sub redelivers until classify acknowledges (nil).
		for attempt := 1; ; attempt++ {
			deliveries++
			err := c.Handle(ctx, msg)
			if err == nil {
				break
			}
			if attempt == 5 {
				t.Fatalf("classify %s: still failing after %d deliveries: %v", ev.ID, attempt, err)
			}
		}
	}
	r := s.settle(b, 3*time.Minute)
	r.Note = fmt.Sprintf("(%d classify deliveries for %d events; %d replay crashes injected)", deliveries, n, len(replays.seen))
	return r
}
