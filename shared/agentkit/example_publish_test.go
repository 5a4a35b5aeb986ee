package agentkit_test

import (
	"context"
	"log"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/agentkit"
)

// A producer publishes its tasks through Publish with the predictions on:
// a task the learnt model predicts to fail runs with the policy's strategy
// applied from its first attempt, or goes to the DLQ at once; every other
// task is published as it is and counted for the learner.
func ExampleKit_Publish() {
	var js jetstream.JetStream // from jetstream.New(nc)
	var fs *firestore.Client   // from firestore.NewClient
	publish := func(ctx context.Context) error {
		kit := agentkit.New(js, agentkit.WithFirestore(fs), agentkit.WithPredictions(5*time.Minute))
		defer kit.Close(context.WithoutCancel(ctx)) // writes the last task counts
		res, err := kit.Publish(ctx, "agents.backend.tasks.implementation", []byte(`{"spec":"..."}`),
			map[string][]string{"X-Task-ID": {"task-42"}, "X-Tenant-ID": {"acme"}})
		if err != nil {
			return err // nothing was published: publish again
		}
		if res.Predicted {
			log.Printf("predicted %s (p=%.2f), routed to the DLQ: %v", res.Prediction.Reason, res.Prediction.Probability, res.Routed)
		}
		return nil
	}
	_ = publish
}
