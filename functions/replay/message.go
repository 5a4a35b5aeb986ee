package replay

import (
	"strconv"

	"github.com/nats-io/nats.go"

	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file builds the message a replay publishes.

// MsgID is the Nats-Msg-Id of a replay: the entry id is unique per dead
// message (a replay that dies again is a new entry), the attempt per task,
// so a repeated publish of one attempt is a duplicate and nothing else is.
func MsgID(entryID string, attempt int) string { return entryID + "-r" + strconv.Itoa(attempt) }

// Message builds the replay of e: payload and headers (the version the
// entry replays: store.Entry.ReplayVersion, HeadersOf; the idempotency key
// included), JetStream control headers of the original publish and jsdlq
// headers of an earlier replay dropped, the plan's modifications added, and
// the subject rerouted when the plan names an alternate agent.
func Message(e *store.Entry, payload []byte, headers map[string][]string, plan store.Plan, strategy string, attempt int) *nats.Msg {
	subject := e.Subject
	if plan.AlternateSubject != "" {
		subject = plan.AlternateSubject
	}
	h := nats.Header(jevent.CopyForReplay(headers))
	if plan.AlternateAgent != "" && subject != e.Subject {
		jevent.DefaultConventions.Reassign(h, plan.AlternateAgent)
	}
	var completed []string
	if f := e.Failure; f != nil {
		completed = f.CompletedSteps
	}
	r := plan.Replay(e.ID, attempt, strategy, completed)
	r.Set(h)
	return &nats.Msg{Subject: subject, Header: h, Data: payload}
}
