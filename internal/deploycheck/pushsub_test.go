package deploycheck

import (
	"fmt"
	"testing"

	"github.com/jsdlq/jsdlq/tools/stack"
)

// The local stacks (stackctl, loadgen) create classify's push subscription
// with stack.ClassifySubscription: it must redeliver as the subscription a
// default deployment plans does, or what they show of retries and dead
// letters is not what production does.
func TestLocalClassifySubscriptionIsTerraforms(t *testing.T) {
	t.Parallel()
	p := offlinePlan(t)
	var planned []tfResource
	for _, r := range p.resources("google_pubsub_subscription") {
		if r.Name == "classify" {
			planned = append(planned, r)
		}
	}
	if len(planned) != 1 {
		t.Fatalf("plan has %d classify subscriptions, want 1", len(planned))
	}
	v := planned[0].Values
	local := stack.ClassifySubscription("projects/p/subscriptions/s", "projects/p/topics/t", "projects/p/topics/t-dead", "127.0.0.1:1")
	tests := []struct {
		field     string
		got, want string
	}{
		{"ack_deadline_seconds", fmt.Sprint(local.AckDeadlineSeconds), fmt.Sprint(v["ack_deadline_seconds"])},
		{"retry_policy.minimum_backoff", seconds(local.RetryPolicy.MinimumBackoff.AsDuration().Seconds()), str(block(v, "retry_policy")["minimum_backoff"])},
		{"retry_policy.maximum_backoff", seconds(local.RetryPolicy.MaximumBackoff.AsDuration().Seconds()), str(block(v, "retry_policy")["maximum_backoff"])},
		{"dead_letter_policy.max_delivery_attempts", fmt.Sprint(local.DeadLetterPolicy.MaxDeliveryAttempts), fmt.Sprint(block(v, "dead_letter_policy")["max_delivery_attempts"])},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("ClassifySubscription %s = %s, want %s (Terraform's plan)", tt.field, tt.got, tt.want)
		}
	}
}

// block is the first (only) instance of a nested block of planned values.
func block(v map[string]any, name string) map[string]any {
	if l, ok := v[name].([]any); ok && len(l) > 0 {
		m, _ := l[0].(map[string]any)
		return m
	}
	return nil
}

// seconds spells a whole number of seconds as Terraform's duration strings
// do ("10s").
func seconds(s float64) string { return fmt.Sprintf("%gs", s) }
