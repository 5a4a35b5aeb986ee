package testenv

import (
	"context"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// TopicWithSubscription creates the topic and a pull subscription sub on it.
// The ack deadline is a minute, as classify's deployed subscription has: a test
// that holds a message while a slow handler works sees no redelivery it did
// not cause.
func TopicWithSubscription(t testing.TB, ctx context.Context, ps *pubsub.Client, topic, sub string) {
	t.Helper()
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic, AckDeadlineSeconds: 60}); err != nil {
		t.Fatalf("create subscription %s: %v", sub, err)
	}
}
