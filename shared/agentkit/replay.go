package agentkit

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
)

// ReplayOf reads what a replay's Jsdlq-* headers ask of the agent (strategy,
// instructions, target model, token limits, the steps the failed attempt
// already completed); IsReplay is false for a first attempt.
func ReplayOf(msg jetstream.Msg) event.Replay { return event.ParseReplay(msg.Headers()) }

// IdempotencyKey is the key jsdlq records the task's completion under, read
// from msg's headers by the conventions replay and reconcile use
// (docs/contracts.md, "Message headers"): X-Idempotency-Key, else
// "<X-Task-ID>-<X-Task-Version>", else the task id, else "" (the task has no
// key: Once cannot protect it).
func IdempotencyKey(msg jetstream.Msg) string {
	return event.DefaultConventions.IdempotencyKey(msg.Headers())
}
