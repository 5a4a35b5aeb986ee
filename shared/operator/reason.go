package operator

import (
	"fmt"
	"strings"
	"unicode/utf8"

	jevent "github.com/jsdlq/jsdlq/shared/event"
)

// MaxReasonBytes bounds the reason an operator gives for an action.
const MaxReasonBytes = 1000

// ErrBadReason is a reason Reason refuses; it is an ErrBadEdit, so every
// front door answers it as a bad request.
var ErrBadReason = fmt.Errorf("%w: bad reason", ErrBadEdit)

// Reason checks the reason an operator gives for action ("a discard", "a
// breaker probe", "a breaker close", "a bulk redrive"), the one rule of
// the console, the tenant API, dlqctl and the triage agent's answers: 1 to
// MaxReasonBytes bytes of visible UTF-8 on one line once trimmed
// (event.Visible: no control, format or bidirectional characters). The
// history records it and every output shows it, so a line break or an
// override in it could forge a history line. It returns the trimmed reason.
func Reason(action, v string) (string, error) {
	reason := strings.TrimSpace(v)
	switch {
	case reason == "" || len(reason) > MaxReasonBytes:
		return "", fmt.Errorf("%w: %s needs a reason of 1 to %d bytes", ErrBadReason, action, MaxReasonBytes)
	case !utf8.ValidString(reason):
		return "", fmt.Errorf("%w: the reason for %s is not UTF-8", ErrBadReason, action)
	}
	for _, r := range reason {
		if !jevent.Visible(r) {
			return "", fmt.Errorf("%w: the reason for %s holds the control or invisible character %U; give it on one line of visible text", ErrBadReason, action, r)
		}
	}
	return reason, nil
}
