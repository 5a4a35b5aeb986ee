package event_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
)

// Decoding what the bridge published, as classify does: anything invalid is
// an ErrInvalid, to be logged and acknowledged rather than retried.
func ExampleDecode() {
	e := event.Event{Schema: event.Schema, ID: event.ID("TASKS", 7), Kind: event.KindExplicit,
		Stream: "TASKS", StreamSeq: 7, Tenant: "acme",
		Failure:    &event.Failure{Code: "context_window_overflow", RecordedAt: time.Unix(0, 0).UTC()},
		ObservedAt: time.Unix(60, 0).UTC()}
	e.Message.Subject = "agents.cto.tasks.architecture"
	e.Message.Headers = event.EncodeHeaders(map[string][]string{"X-Raw": {"\xff"}})
	e.Message.SetPayload([]byte(`{"task":"design"}`))
	body, _ := event.Encode(e)

	got, err := event.Decode(body)
	fmt.Println(got.ID, got.Kind, got.Failure.Code, string(got.Message.Data), err)
	raw, _ := event.DecodeHeaders(got.Message.Headers)
	fmt.Printf("%q %q\n", got.Message.Headers["X-Raw"][0], raw["X-Raw"][0])
	fmt.Println(got.Attributes())

	_, err = event.Decode([]byte(`{"schema":"jsdlq.event.v2"}`))
	fmt.Println(errors.Is(err, event.ErrInvalid), err)
	// Output:
	// TASKS.7 explicit context_window_overflow {"task":"design"} <nil>
	// "jsdlq-b64:/w==" "\xff"
	// map[event_id:TASKS.7 kind:explicit stream:TASKS tenant:acme]
	// true event: invalid: unknown schema "jsdlq.event.v2" (want "jsdlq.event.v1")
}
