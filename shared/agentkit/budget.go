package agentkit

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/event"
)

// EstimateTokens estimates how many model tokens text takes. BPE tokenizers
// of current models average about 4 characters per token on English prose
// and code; text outside ASCII (accents, CJK, emoji) takes about one token per
// character or more. So: ASCII bytes / 4, rounded up, plus one token per
// non-ASCII character. It errs on the high side for non-Latin text, the safe
// side for a pre-flight check. Use the provider's tokenizer when exactness
// matters.
func EstimateTokens(text string) int {
	ascii, other := 0, 0
	for i := 0; i < len(text); {
		if text[i] < utf8.RuneSelf {
			ascii++
			i++
			continue
		}
		_, n := utf8.DecodeRuneInString(text[i:])
		other++
		i += n
	}
	return (ascii+3)/4 + other
}

// DefaultWarnFraction is the share of the window above which Check warns.
const DefaultWarnFraction = 0.8

// Budget is a context window.
type Budget struct {
	MaxTokens int
	// WarnFraction: Check sets Warn above it (default 0.8).
	WarnFraction float64
}

// BudgetFromHeaders returns the agent's window, narrowed by a replay's
// Jsdlq-Max-Context-Tokens header when that is smaller.
func BudgetFromHeaders(h map[string][]string, window int) Budget {
	b := Budget{MaxTokens: window}
	if n := event.ParseReplay(h).MaxContextTokens; n > 0 && (b.MaxTokens <= 0 || n < b.MaxTokens) {
		b.MaxTokens = n
	}
	return b
}

// Estimate is the outcome of Check.
type Estimate struct {
	Tokens    int
	MaxTokens int
	Warn      bool // above WarnFraction of the window
}

// Fraction is the share of the window the estimate uses.
func (e Estimate) Fraction() float64 {
	if e.MaxTokens <= 0 {
		return 0
	}
	return float64(e.Tokens) / float64(e.MaxTokens)
}

// ErrContextWindowOverflow is wrapped by Check's error; its Failure gives the
// context_window_overflow failure to Terminate with.
var ErrContextWindowOverflow = errors.New("agentkit: context_window_overflow")

// OverflowError is Check's refusal.
type OverflowError struct{ Estimate }

func (e *OverflowError) Error() string {
	return fmt.Sprintf("%v: about %d tokens, window %d", ErrContextWindowOverflow, e.Tokens, e.MaxTokens)
}

func (e *OverflowError) Unwrap() error { return ErrContextWindowOverflow }

// Failure is the failure to record for this refusal. Retryable is left to
// the policy: an overflow is recoverable with a compressed context.
func (e *OverflowError) Failure() Failure {
	return Failure{Code: CodeContextWindowOverflow, Detail: e.Error()}
}

// Check estimates the tokens of the prompt parts and refuses, before any model
// call, when they exceed the window. A budget without MaxTokens admits
// everything.
func (b Budget) Check(parts ...string) (Estimate, error) {
	e := Estimate{MaxTokens: b.MaxTokens}
	for _, p := range parts {
		e.Tokens += EstimateTokens(p)
	}
	if b.MaxTokens <= 0 {
		return e, nil
	}
	warn := b.WarnFraction
	if warn <= 0 {
		warn = DefaultWarnFraction
	}
	if e.Tokens > b.MaxTokens {
		return e, &OverflowError{e}
	}
	e.Warn = e.Fraction() > warn
	return e, nil
}

// Preflight is Budget.Check that logs a warning above the warn fraction.
func (k *Kit) Preflight(b Budget, parts ...string) (Estimate, error) {
	e, err := b.Check(parts...)
	if err == nil && e.Warn {
		k.log.Warn("prompt close to the context window", "tokens", e.Tokens, "max_tokens", e.MaxTokens,
			"fraction", fmt.Sprintf("%.2f", e.Fraction()))
	}
	return e, err
}
