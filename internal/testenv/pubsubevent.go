package testenv

import (
	"github.com/cloudevents/sdk-go/v2/event"
)

// PubSubEvent is the CloudEvent that Eventarc (and the functions framework,
// for a push request) hands classify for the Pub/Sub message msgID of the
// dlq-events topic carrying body with attrs.
func PubSubEvent(msgID string, body []byte, attrs map[string]string) (event.Event, error) {
	ce := event.New()
	ce.SetID(msgID)
	ce.SetSource("//pubsub.googleapis.com/projects/p/topics/dlq-events")
	ce.SetType("google.cloud.pubsub.topic.v1.messagePublished")
	err := ce.SetData("application/json", map[string]any{
		"message": map[string]any{
			"data": body, "attributes": attrs, "messageId": msgID, "publishTime": "2026-11-21T10:00:00Z",
		},
		"subscription": "projects/p/subscriptions/classify",
	})
	return ce, err
}
