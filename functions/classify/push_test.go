package classify

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// TestPushSubscriptionEndToEnd runs the real local wiring: the Pub/Sub
// emulator pushes to the functions host (cmd/functions), whose framework
// turns the push request into a CloudEvent for Classify, configured from the
// environment exactly as in the local stack. The entry must land in
// Firestore and its replay task in the Cloud Tasks emulator.
func TestPushSubscriptionEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the functions host")
	}
	ps, project := testenv.PubSub(t)
	ctx := testenv.Context(t)
	emu := testenv.NewCloudTasks(t, cloudtasks.WithClock(cloudtasks.NewFakeClock(time.Now())))
	queue := emu.Queue(t, "test-project", "dlq-replay")

	addr, logFile := testenv.FunctionsHost(t,
		"GOOGLE_CLOUD_PROJECT="+project,
		"FIRESTORE_EMULATOR_HOST="+testenv.FirestoreHost(t),
		"CLOUD_TASKS_EMULATOR_HOST="+emu.Host,
		"TASKS_QUEUE="+queue,
		"REPLAY_URL=http://127.0.0.1:9/Replay",
		"TASKS_SERVICE_ACCOUNT=tasks@"+project+".iam.gserviceaccount.com",
	)

	topic := fmt.Sprintf("projects/%s/topics/dlq-events", project)
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: fmt.Sprintf("projects/%s/subscriptions/classify-push", project), Topic: topic,
		PushConfig: &pubsubpb.PushConfig{PushEndpoint: "http://" + addr + "/Classify"},
	}); err != nil {
		t.Fatal(err)
	}
	ev := explicit(77, "llm_provider_rate_limit", "429 from provider", msg{payload: []byte(`{"task":"push"}`)})
	body := mustEncode(t, ev)
	pub := ps.Publisher(topic)
	defer pub.Stop()
	if _, err := pub.Publish(ctx, &pubsub.Message{Data: body, Attributes: ev.Attributes()}).Get(ctx); err != nil {
		t.Fatal(err)
	}

	st := store.New(firestoreFor(t, project))
	var got *store.Entry
	testenv.WaitFor(t, 60*time.Second, func() error {
		var err error
		if got, err = st.Get(ctx, "TASKS.77"); err != nil {
			logs, _ := os.ReadFile(logFile)
			return fmt.Errorf("no entry after the push: %v\nfunctions host log:\n%s", err, logs)
		}
		return nil
	})
	if got.Status != store.Scheduled || got.ReasonCode != "llm_provider_rate_limit" || string(got.Payload) != `{"task":"push"}` {
		t.Errorf("entry = %s %s %q", got.Status, got.ReasonCode, got.Payload)
	}
	// Classify commits the entry first and creates its task right after:
	// the entry can be read before the task exists.
	testenv.WaitFor(t, 30*time.Second, func() error {
		names := emu.Tasks(t, queue)
		if len(names) != 1 || !strings.HasSuffix(names[0], "/"+tasks.Name("TASKS.77", 1)) {
			return fmt.Errorf("queue tasks = %v, want the entry's replay", names)
		}
		return nil
	})
}
