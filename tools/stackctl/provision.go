package main

import (
	"context"
	"fmt"
	"io"
	"os"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jsdlq/jsdlq/shared/clientopt"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/tools/stack"
)

// provision creates what the pipeline expects to exist once service name is
// up, as Terraform does in a real project: after the Pub/Sub emulator, the
// dlq-events topic with its push subscription to /Classify (and its
// dead-letter topic with a subscription), the dlq-notifications topic with a
// pull subscription dlq-notifications-all, the change feed's topic
// dlq-changes with a pull subscription dlq-changes-all (where BigQuery's
// subscription would be); after the Cloud Tasks emulator, the
// dlq-replay and dlq-webhooks queues. It runs before the bridge starts: Pub/Sub drops what is
// published to a topic without subscriptions. Existing ones are kept.
func (s *localStack) provision(ctx context.Context, name string, w io.Writer) error {
	switch name {
	case "pubsub":
		return s.provisionPubSub(ctx, w)
	case "cloudtasks":
		return s.provisionQueue(ctx, w)
	}
	return nil
}

func (s *localStack) provisionPubSub(ctx context.Context, w io.Writer) error {
	os.Setenv("PUBSUB_EMULATOR_HOST", s.addr("pubsub"))
	ps, err := pubsub.NewClient(ctx, s.project)
	if err != nil {
		return fmt.Errorf("pubsub client: %w", err)
	}
	defer ps.Close()
	topic := fmt.Sprintf("projects/%s/topics/dlq-events", s.project)
	deadTopic := fmt.Sprintf("projects/%s/topics/dlq-events-dead", s.project)
	// Notifications, with one pull subscription that keeps them all (the
	// demo counts them; subscribe your own to try filters).
	notifications := fmt.Sprintf("projects/%s/topics/dlq-notifications", s.project)
	changes := fmt.Sprintf("projects/%s/topics/%s", s.project, event.DefaultChangesTopic)
	for _, t := range []string{topic, deadTopic, notifications, changes} {
		if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: t}); err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
		fmt.Fprintf(w, "  topic        %s\n", t)
	}
	subs := []*pubsubpb.Subscription{{
		Name: fmt.Sprintf("projects/%s/subscriptions/dlq-events-dead-hold", s.project), Topic: deadTopic,
		MessageRetentionDuration: durationpb.New(7 * 24 * 3600e9),
	}, {
		Name: fmt.Sprintf("projects/%s/subscriptions/dlq-notifications-all", s.project), Topic: notifications,
		MessageRetentionDuration: durationpb.New(24 * 3600e9),
	}, {
		Name: fmt.Sprintf("projects/%s/subscriptions/%s-all", s.project, event.DefaultChangesTopic), Topic: changes,
		MessageRetentionDuration: durationpb.New(7 * 24 * 3600e9),
	}}
	if s.running("functions") {
		subs = append(subs, stack.ClassifySubscription(fmt.Sprintf("projects/%s/subscriptions/classify-push", s.project), topic, deadTopic, s.addr("functions")))
	}
	for _, sub := range subs {
		if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, sub); err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create subscription %s: %w", sub.Name, err)
		}
		fmt.Fprintf(w, "  subscription %s\n", sub.Name)
	}
	return nil
}

func (s *localStack) provisionQueue(ctx context.Context, w io.Writer) error {
	ct, err := cloudtasks.NewClient(ctx, clientopt.CloudTasksOptions(s.addr("cloudtasks"))...)
	if err != nil {
		return fmt.Errorf("cloud tasks client: %w", err)
	}
	defer ct.Close()
	for _, q := range []*cloudtaskspb.Queue{{
		Name:        s.queue(),
		RateLimits:  &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 50, MaxConcurrentDispatches: 20},
		RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: 10, MinBackoff: durationpb.New(5e9), MaxBackoff: durationpb.New(300e9), MaxDoublings: 4},
	}, {
		// Tenant webhook deliveries to /Deliver, retried with backoff.
		Name:        s.webhookQueue(),
		RateLimits:  &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 50, MaxConcurrentDispatches: 20},
		RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: 12, MinBackoff: durationpb.New(2e9), MaxBackoff: durationpb.New(300e9), MaxDoublings: 6},
	}} {
		_, err = ct.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: fmt.Sprintf("projects/%s/locations/%s", s.project, s.location), Queue: q})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create queue %s: %w", q.Name, err)
		}
		fmt.Fprintf(w, "  queue        %s\n", q.Name)
	}
	return nil
}

func (s *localStack) running(name string) bool {
	for _, svc := range s.services {
		if svc.name == name {
			return svc.skip == ""
		}
	}
	return false
}
