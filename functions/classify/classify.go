// Package classify is the classify function (SPEC §8): it turns a
// jsdlq.event.v1 CloudEvent from Pub/Sub into a categorised failure-log entry,
// metrics and, where the policy says so, a scheduled replay.
package classify

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// Config is what classify reads from its environment.
type Config struct{}

// Deps are the clients classify uses.
type Deps struct {
	Logger *slog.Logger
}

// Handler handles one CloudEvent.
type Handler struct {
	log *slog.Logger
}

// New returns a Handler.
func New(_ Config, deps Deps) *Handler {
	return &Handler{log: deps.Logger}
}

// Handle is not built yet: it answers 501 so that Pub/Sub keeps the message
// for redelivery rather than a fake success acknowledging it.
func (h *Handler) Handle(ctx context.Context, e event.Event) error {
	h.log.WarnContext(ctx, "classify: not implemented yet", "event_id", e.ID(), "event_type", e.Type(), "source", e.Source())
	return cehttp.NewResult(http.StatusNotImplemented, "classify: not implemented yet (received CloudEvent id=%s type=%s)", e.ID(), e.Type())
}
