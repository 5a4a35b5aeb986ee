// Package outcome is the one mapping from an error to how every front door
// answers it (docs/contracts.md, "Errors and outcomes"): the console's
// pages, the tenant API (HTTP status and error code) and dlqctl (exit code),
// and whether trying again can help. Each exported sentinel error of the
// packages they surface has its outcome here, once; a test holds the table
// to those packages' exported Err* variables.
package outcome

import (
	"errors"
	"net/http"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// Kind is what went wrong, in the words of the tenant API's error codes.
type Kind string

// Kinds.
const (
	Invalid         Kind = "invalid_argument"    // the request (input, flags, a document) is wrong
	Unauthenticated Kind = "unauthenticated"     // no or a bad credential
	Denied          Kind = "permission_denied"   // the actor may not do this
	NotFound        Kind = "not_found"           // no such thing (or another tenant's)
	Conflict        Kind = "failed_precondition" // the thing is not in a state that allows it
	Unavailable     Kind = "unavailable"         // something it needs cannot be reached now
	Internal        Kind = "internal"            // jsdlq's fault, or unknown
)

// dlqctl's exit codes (docs/contracts.md, "dlqctl exit codes").
const (
	ExitOK       = 0
	ExitError    = 1
	ExitUsage    = 2
	ExitNotFound = 3
	ExitConflict = 4
	ExitPartial  = 5
)

// Outcome is how the front doors answer an error.
type Outcome struct {
	Kind Kind
	// HTTP is the status the console and the tenant API answer with.
	HTTP int
	// Exit is dlqctl's exit code.
	Exit int
	// Retryable: the same request, later, may succeed.
	Retryable bool
}

// Code is the tenant API's error code.
func (o Outcome) Code() string { return string(o.Kind) }

// of is a kind's usual answers.
func of(k Kind, retryable bool) Outcome {
	o := Outcome{Kind: k, Retryable: retryable}
	switch k {
	case Invalid:
		o.HTTP, o.Exit = http.StatusBadRequest, ExitUsage
	case Unauthenticated:
		o.HTTP, o.Exit = http.StatusUnauthorized, ExitError
	case Denied:
		o.HTTP, o.Exit = http.StatusForbidden, ExitError
	case NotFound:
		o.HTTP, o.Exit = http.StatusNotFound, ExitNotFound
	case Conflict:
		o.HTTP, o.Exit = http.StatusConflict, ExitConflict
	case Unavailable:
		o.HTTP, o.Exit = http.StatusServiceUnavailable, ExitError
	default:
		o.Kind, o.HTTP, o.Exit = Internal, http.StatusInternalServerError, ExitError
	}
	return o
}

// Sentinel is one sentinel error with its outcome, named as its package
// exports it.
type Sentinel struct {
	Name    string
	Err     error
	Outcome Outcome
}

const retry, final = true, false

// Sentinels is the table, in the order Of asks it: an error that wraps two
// sentinels answers as the first. A refusal by the authority rule is what it
// is wherever it is wrapped; the triage answers' errors (agentkit's, the
// triage agent's contract) come before the store's and operator's they wrap.
var Sentinels = []Sentinel{
	{"authority.ErrPermissionDenied", authority.ErrPermissionDenied, of(Denied, final)},
	{"operator.ErrPermissionDenied", operator.ErrPermissionDenied, of(Denied, final)},
	{"auth.ErrForbidden", auth.ErrForbidden, of(Denied, final)},

	{"agentkit.ErrTriageNotFound", agentkit.ErrTriageNotFound, of(NotFound, final)},
	{"agentkit.ErrTriageDecided", agentkit.ErrTriageDecided, of(Conflict, final)},
	// The triage agent's answer could not apply as given (an edit or
	// actor refused): 422, which agentkit.TriageStatusError reads back.
	{"agentkit.ErrTriageRefused", agentkit.ErrTriageRefused, Outcome{Kind: Conflict, HTTP: http.StatusUnprocessableEntity, Exit: ExitConflict}},
	{"agentkit.ErrTriageUnfinished", agentkit.ErrTriageUnfinished, of(Unavailable, retry)},
	{"agentkit.ErrBadAnswer", agentkit.ErrBadAnswer, of(Invalid, final)},
	{"agentkit.ErrBadTriage", agentkit.ErrBadTriage, of(Invalid, final)},
	{"agentkit.ErrRecordTooLarge", agentkit.ErrRecordTooLarge, of(Invalid, final)},
	{"agentkit.ErrInProgress", agentkit.ErrInProgress, of(Conflict, retry)},
	{"agentkit.ErrNoFirestore", agentkit.ErrNoFirestore, of(Internal, final)},
	{"agentkit.ErrContextWindowOverflow", agentkit.ErrContextWindowOverflow, of(Invalid, final)},
	{"agentkit.ErrClaimLost", agentkit.ErrClaimLost, of(Conflict, final)},
	{"agentkit.ErrInvalidTask", agentkit.ErrInvalidTask, of(Invalid, final)},
	{"agentkit.ErrNoPredictions", agentkit.ErrNoPredictions, of(Internal, final)},

	{"store.ErrNotFound", store.ErrNotFound, of(NotFound, final)},
	{"operator.ErrNotFound", operator.ErrNotFound, of(NotFound, final)},
	{"store.ErrWrongStatus", store.ErrWrongStatus, of(Conflict, final)},
	{"operator.ErrWrongStatus", operator.ErrWrongStatus, of(Conflict, final)},
	{"store.ErrConflict", store.ErrConflict, of(Conflict, retry)},
	{"store.ErrBreakerOverride", store.ErrBreakerOverride, of(Conflict, final)},
	{"store.ErrLeaseHeld", store.ErrLeaseHeld, of(Conflict, retry)},
	{"store.ErrLeaseLost", store.ErrLeaseLost, of(Conflict, final)},
	{"store.ErrWebhookRefused", store.ErrWebhookRefused, of(Conflict, final)},
	{"store.ErrBadID", store.ErrBadID, of(Invalid, final)},
	{"store.ErrBadQuery", store.ErrBadQuery, of(Invalid, final)},
	{"store.ErrBadCursor", store.ErrBadCursor, of(Invalid, final)},
	{"store.ErrInvalid", store.ErrInvalid, of(Invalid, final)},
	{"store.ErrTooLarge", store.ErrTooLarge, of(Invalid, final)},
	{"store.ErrUnknownKey", store.ErrUnknownKey, of(Unauthenticated, final)},
	{"store.ErrCorrupt", store.ErrCorrupt, of(Internal, final)},
	{"store.ErrChainTooLong", store.ErrChainTooLong, of(Internal, final)},
	// A move the status table does not allow is a caller's bug.
	{"store.ErrTransition", store.ErrTransition, of(Internal, final)},

	{"operator.ErrPayloadMissing", operator.ErrPayloadMissing, of(Conflict, final)},
	{"operator.ErrUnconfirmed", operator.ErrUnconfirmed, of(Invalid, final)},
	{"operator.ErrBadReason", operator.ErrBadReason, of(Invalid, final)},
	{"operator.ErrBadEdit", operator.ErrBadEdit, of(Invalid, final)},
	{"operator.ErrNoActor", operator.ErrNoActor, of(Invalid, final)},
	// The action is recorded; its replay task is not created yet: replay
	// now (again) or reconcile's next run creates it.
	{"operator.ErrTaskNotCreated", operator.ErrTaskNotCreated, of(Unavailable, retry)},

	{"triage.ErrInvalid", triage.ErrInvalid, of(Invalid, final)},
	{"event.ErrInvalid", event.ErrInvalid, of(Invalid, final)},
	{"event.ErrBadName", event.ErrBadName, of(Invalid, final)},
	{"tasks.ErrBadName", tasks.ErrBadName, of(Invalid, final)},
	{"predict.ErrKey", predict.ErrKey, of(Invalid, final)},

	{"redrive.ErrBadRate", redrive.ErrBadRate, of(Invalid, final)},
	{"redrive.ErrStopped", redrive.ErrStopped, of(Conflict, retry)},
	{"reconciler.ErrLeaseHeld", reconciler.ErrLeaseHeld, of(Conflict, retry)},
	{"reconciler.ErrRecountScope", reconciler.ErrRecountScope, of(Invalid, final)},

	{"webhook.ErrRefusedURL", webhook.ErrRefusedURL, of(Invalid, final)},
	{"webhook.ErrOwnUnknown", webhook.ErrOwnUnknown, of(Unavailable, retry)},
	{"webhook.ErrBadSecret", webhook.ErrBadSecret, of(Invalid, final)},
	{"webhook.ErrNoSignature", webhook.ErrNoSignature, of(Unauthenticated, final)},
	{"webhook.ErrBadTimestamp", webhook.ErrBadTimestamp, of(Unauthenticated, final)},
	{"webhook.ErrBadSignature", webhook.ErrBadSignature, of(Unauthenticated, final)},
	{"hooksecret.ErrNoSecret", hooksecret.ErrNoSecret, of(Internal, final)},
	{"secretbox.ErrOpen", secretbox.ErrOpen, of(Internal, final)},
	{"secretbox.ErrKey", secretbox.ErrKey, of(Unavailable, retry)},

	{"auth.ErrUnauthenticated", auth.ErrUnauthenticated, of(Unauthenticated, final)},
	{"auth.ErrUnavailable", auth.ErrUnavailable, of(Unavailable, retry)},
	{"natsconn.ErrNotConnected", natsconn.ErrNotConnected, of(Unavailable, retry)},
	// The deployment's configuration is wrong, not the request.
	{"config.ErrInvalid", config.ErrInvalid, of(Internal, final)},
}

// Of is the outcome of err: its first sentinel's in Sentinels, Internal
// (retryable: an I/O failure may pass) for any other error. Of(nil) is the
// zero Outcome.
func Of(err error) Outcome {
	if err == nil {
		return Outcome{}
	}
	for _, s := range Sentinels {
		if errors.Is(err, s.Err) {
			return s.Outcome
		}
	}
	return of(Internal, retry)
}
