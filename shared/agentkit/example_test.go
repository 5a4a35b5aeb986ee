package agentkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/firestore"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/nats-io/nats.go/jetstream"
)

// An agent's handler: pre-flight the prompt, do the work once, and on failure
// either retry later (Fail) or give up with a copy (Terminate).
func Example() {
	handle := func(ctx context.Context, kit *agentkit.Kit, msg jetstream.Msg, callModel func(context.Context, string) error) error {
		prompt := string(msg.Data())
		budget := agentkit.BudgetFromHeaders(msg.Headers(), 128_000)
		if _, err := kit.Preflight(budget, prompt); err != nil {
			var oe *agentkit.OverflowError
			if errors.As(err, &oe) {
				// No tokens spent; the replay strategy compresses the context.
				return kit.Terminate(ctx, msg, oe.Failure())
			}
			return err
		}
		// The task's tenant and idempotency key, from its headers.
		ran, err := kit.Once(ctx, agentkit.TaskOf(msg), func(ctx context.Context) error { return callModel(ctx, prompt) })
		switch {
		case errors.Is(err, agentkit.ErrInProgress):
			return msg.Nak() // a duplicate is working on it
		case err != nil:
			return kit.Fail(ctx, msg, agentkit.Failure{Code: "llm_provider_timeout", Detail: err.Error()})
		}
		_ = ran // false: completed before (a redelivery or replay); ack anyway
		return msg.Ack()
	}
	var js jetstream.JetStream // from jetstream.New(nc)
	var fs *firestore.Client   // from firestore.NewClient
	kit := agentkit.New(js, agentkit.WithAgent("backend"), agentkit.WithFirestore(fs))
	_, _ = handle, kit
}

func ExampleBudget_Check() {
	b := agentkit.Budget{MaxTokens: 1000}
	e, err := b.Check(strings.Repeat("abcd", 850))
	fmt.Println(e.Tokens, e.Warn, err)
	_, err = b.Check(strings.Repeat("abcd", 1001))
	fmt.Println(err)
	// Output:
	// 850 true <nil>
	// agentkit: context_window_overflow: about 1001 tokens, window 1000
}
