package notify_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/secrettest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/store"
)

// failingHooks fails every delivery of one endpoint, then works.
type failingHooks struct {
	notify.WebhookTasks
	endpoint string
	fail     bool
}

func (f *failingHooks) CreateDelivery(ctx context.Context, t notify.WebhookTask) (bool, error) {
	if f.fail && t.WebhookID == f.endpoint {
		return false, errors.New("injected: cloud tasks unavailable")
	}
	return f.WebhookTasks.CreateDelivery(ctx, t)
}

// A flush creates one delivery task per tenant notification and enabled
// endpoint of that tenant, named by both; flushing again, even after a
// failure half-way, creates none twice. That is why a retried flush is
// safe: the task name is derived from the endpoint and the notification,
// so Cloud Tasks answers ALREADY_EXISTS to a repeat, and a notification is
// marked done only when all its deliveries exist.
func TestFlushFansOutOncePerEndpointAndNotification(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	ct := testenv.NewCloudTasks(t)
	project := strings.Split(ct.Queue(t, testenv.Project(t), "probe"), "/")[1]
	queue := ct.Queue(t, project, "dlq-webhooks")
	// Paused: the tasks stay in the queue for the test to list.
	if _, err := ct.Client.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: queue}); err != nil {
		t.Fatal(err)
	}
	wq := notify.NewWebhookQueue(config.Webhooks{Queue: queue, DeliverURL: "https://deliver.example/Deliver",
		ServiceAccount: "hooks@p.iam.gserviceaccount.com", EmulatorHost: ct.Host})
	t.Cleanup(func() { wq.Close() })

	box, _ := secrettest.Box(t)
	var acme []*store.Webhook
	for i := range 2 {
		w, _, err := hooksecret.Create(ctx, e.store, box, "acme", fmt.Sprintf("https://hooks.acme.example/%d", i), "test")
		if err != nil {
			t.Fatal(err)
		}
		acme = append(acme, w)
	}
	off, _, err := hooksecret.Create(ctx, e.store, box, "acme", "https://hooks.acme.example/off", "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.RecordWebhookAttempt(ctx, off.ID, store.WebhookAttempt{Error: "HTTP 500"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := hooksecret.Create(ctx, e.store, box, "globex", "https://hooks.globex.example/", "test"); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for i, tenant := range []string{"acme", "acme", "initech"} {
		id := event.ID("TASKS", uint64(i+1))
		en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(i + 1), Subject: "agents.cto.tasks.x",
			Tenant: tenant, Agent: "cto", TaskType: "x", Kind: "terminated", Payload: []byte("{}"), Category: "permanent",
			ReasonCode: "impossible_task", Action: "quarantine", Status: store.Quarantined}
		if _, err := e.store.Record(ctx, en, "test"); err != nil {
			t.Fatal(err)
		}
		if tenant == "acme" {
			notes = append(notes, event.NotificationID(event.NotifyQuarantined, id, e.clock.Now()))
		}
	}
	var want []string
	for _, w := range acme {
		for _, n := range notes {
			want = append(want, queue+"/tasks/"+notify.WebhookTask{WebhookID: w.ID, NotificationID: n}.Name())
		}
	}
	sort.Strings(want)

	hooks := &failingHooks{WebhookTasks: wq, endpoint: acme[1].ID, fail: true}
	f := e.flusher(notify.WithWebhooks(hooks))
	res, err := f.Flush(ctx)
	if err != nil || res.Webhooks > 2 || len(res.WebhookErrors) != 2 {
		t.Fatalf("Flush with one endpoint failing = %+v, %v, want both acme notifications left for the next flush", res, err)
	}
	created := res.Webhooks
	hooks.fail = false
	for i := range 2 {
		res, err := f.Flush(ctx)
		if err != nil || len(res.WebhookErrors) != 0 {
			t.Fatalf("Flush #%d = %+v, %v", i+2, res, err)
		}
		created += res.Webhooks
		if i == 1 && res.Webhooks != 0 {
			t.Errorf("Flush #3 created %d deliveries, want none", res.Webhooks)
		}
	}
	if created != len(want) {
		t.Errorf("the flushes created %d deliveries, want %d", created, len(want))
	}
	got := ct.Tasks(t, queue)
	sort.Strings(got)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("tasks (-want +got):\n%s", d)
	}
	if p, err := e.store.PendingWebhookFanOut(ctx, 10); err != nil || len(p) != 0 {
		t.Errorf("PendingWebhookFanOut after the flushes = %d, %v, want none", len(p), err)
	}
	// A flusher without webhooks leaves the fan-out to one that has them.
	id := event.ID("TASKS", 9)
	en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: 9, Subject: "agents.cto.tasks.x", Tenant: "acme",
		Agent: "cto", TaskType: "x", Kind: "terminated", Payload: []byte("{}"), Category: "permanent",
		ReasonCode: "impossible_task", Action: "quarantine", Status: store.Quarantined}
	if _, err := e.store.Record(ctx, en, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.flusher().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := e.store.PendingWebhookFanOut(ctx, 10); err != nil || len(p) != 1 {
		t.Errorf("PendingWebhookFanOut after a flush without webhooks = %d, %v, want 1", len(p), err)
	}
}

// countingHooks counts the deliveries it is asked for.
type countingHooks struct{ n int }

func (c *countingHooks) CreateDelivery(context.Context, notify.WebhookTask) (bool, error) {
	c.n++
	return true, nil
}

// A notification of a tenant no endpoint can be registered for (ingestion
// keeps an entry whatever its tenant header says: over-long, or with a
// control character) has nothing to fan out, and its fan-out is recorded
// done. Left pending, it failed every flush until it expired, and enough of
// them filled the batches that list pending fan-outs, for every tenant.
func TestFanOutOfATenantWithoutEndpointsIsDone(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	for i, tenant := range []string{strings.Repeat("t", 300), "acme\x01corp"} {
		id := event.ID("TASKS", uint64(i+1))
		en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(i + 1), Subject: "agents.cto.tasks.x",
			Tenant: tenant, Agent: "cto", TaskType: "x", Kind: "terminated", Payload: []byte("{}"), Category: "permanent",
			ReasonCode: "impossible_task", Action: "quarantine", Status: store.Quarantined}
		if _, err := e.store.Record(ctx, en, "test"); err != nil {
			t.Fatalf("Record(tenant %q) = %v", tenant, err)
		}
	}
	if p, err := e.store.PendingWebhookFanOut(ctx, 10); err != nil || len(p) != 2 {
		t.Fatalf("PendingWebhookFanOut before the flush = %d, %v, want 2", len(p), err)
	}
	hooks := &countingHooks{}
	res, err := e.flusher(notify.WithWebhooks(hooks)).Flush(ctx)
	if err != nil || len(res.WebhookErrors) != 0 || hooks.n != 0 {
		t.Errorf("Flush = %+v, %v with %d deliveries, want no error and no delivery", res, err, hooks.n)
	}
	if p, err := e.store.PendingWebhookFanOut(ctx, 10); err != nil || len(p) != 0 {
		t.Errorf("PendingWebhookFanOut after the flush = %d, %v, want none", len(p), err)
	}
}
