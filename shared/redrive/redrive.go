// Package redrive is the bulk redrive engine dlqctl (`dlqctl redrive`) and
// the console's bulk runs share: which entries of a filter it acts on and
// how (Step), the plan it shows before acting (NewPlan), the velocity cap
// (Bucket), and the run itself (Run), which pages through the filter after
// a keyset cursor, writes each action ahead in its progress
// (store.RedriveProgress) and settles, on resume, the one entry a crash
// may have left undecided, so every entry is acted on at most once however
// often the run stops and resumes. Where the progress is kept (a file, a
// Firestore document) is the caller's: Run calls its Save.
//
// Every action goes through shared/operator, so the replays it asks for
// meet the same gates as any other, and the same authority rule: a redrive
// acts in its actor's role on the entries that role may act on, and leaves
// the entries whose rule keeps approval for approvers alone unless it is
// opted into them (OptInApproverRules).
package redrive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Actions a redrive takes. Every other entry it meets is left alone.
const (
	// Approve: an entry waiting for a human (operator.Approvable). The
	// approval answers the policy; the replay still meets the idempotency
	// record and the breaker.
	Approve = "approve"
	// RunNow: a scheduled entry's task runs now (operator.ReplayNow); the
	// replay still meets all three gates.
	RunNow = "run-now"
)

// Why an entry is left alone.
const (
	LeaveHeld     = "held"     // its breaker releases it, not a redrive
	LeaveExcluded = "excluded" // its rule keeps approval for approvers: it needs the opt-in
	LeaveDenied   = "denied"   // the actor's role may not act on it
	LeaveNothing  = "nothing"  // nothing to do in its status
)

// OptInApproverRules is the opt-in (dlqctl's --include-approver-rules, the
// console's checkbox) that takes into a redrive the entries whose rule keeps
// approval for approvers (the policy's approvers, by default governance,
// poison and unknown commit state): an operator may not approve them, and
// approving them unchanged in bulk is rarely right (a governance denial, a
// payload known to be broken, a task whose side effects may have happened).
// Only an approver's redrive approves them; an operator's, opted in, only
// runs the scheduled ones now.
const OptInApproverRules = "approver-rules"

// OptInReleaseHeld takes a breaker's held entries into a redrive, each
// released with RunNow (operator.ReplayNowIn: a new task due now, which
// still meets all three gates). Only the breaker's own override sets it:
// the console's Close starts such a run for the tenant's held entries, the
// breaker having just been closed by an operator; no form or flag can ask
// for it, since a redrive never releases what an open breaker holds.
const OptInReleaseHeld = "release-held"

// OptInFlag is dlqctl's flag of the opt-in.
const OptInFlag = "include-approver-rules"

// optedIn reports whether include takes e in. A redrive saved before the
// opt-in was one (a checkpoint, a console run) names the categories it
// opted into: such a redrive keeps taking in exactly those.
func optedIn(include []string, e *store.Entry) bool {
	return slices.Contains(include, OptInApproverRules) || slices.Contains(include, e.Category)
}

// Authority is the authority rule a redrive asks (*operator.Operator):
// nil when by may take act on e.
type Authority interface {
	May(ctx context.Context, by authority.Actor, act authority.Action, e *store.Entry) error
}

// ErrBadRate is a velocity cap that is not a finite positive rate.
var ErrBadRate = errors.New("redrive: bad rate")

// ParseRate reads "5/s", "5", "300/m" as actions per second.
func ParseRate(s string) (float64, error) {
	num, unit, slash := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || !(n > 0) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("%w: %q: want a positive number per second such as 5/s", ErrBadRate, s)
	}
	switch {
	case unit == "" && !slash, unit == "s":
	case unit == "m", unit == "min":
		n /= 60
	default:
		return 0, fmt.Errorf("%w: %q: unit must be /s or /m", ErrBadRate, s)
	}
	if n < MinRate {
		return 0, fmt.Errorf("%w: %q: at least one action an hour (%g/s)", ErrBadRate, s, MinRate)
	}
	return n, nil
}

// MinRate is the slowest rate a redrive takes, one action an hour: a slower
// one is a typo, and at about 1e-10/s the interval between two actions no
// longer fits a time.Duration.
const MinRate = 1.0 / 3600

// Step is what a redrive does with one entry: an action, or why it leaves
// it alone.
type Step struct{ Action, Leave string }

// actions are the authority rule's names of a redrive's actions.
var actions = map[string]authority.Action{Approve: authority.Approve, RunNow: authority.ReplayNow}

// StepFor decides for an entry as listed, for a redrive by by with the
// opt-ins include. A held entry is never released by a redrive: an open
// breaker holds a replay whoever asked, and only its own override (breaker
// probe or close) or reconcile, once the breaker admits, lets it go. An
// entry whose rule keeps approval for approvers (one an operator may not
// approve: the same rule that decides every action) is excluded without
// the opt-in; an entry by's role may not act on is left alone.
func StepFor(ctx context.Context, auth Authority, by authority.Actor, e *store.Entry, include []string) (Step, error) {
	var s Step
	switch {
	case e.Status == store.Held && !slices.Contains(include, OptInReleaseHeld):
		return Step{Leave: LeaveHeld}, nil
	case e.Status == store.Held:
		s = Step{Action: RunNow}
	case slices.Contains(operator.Approvable, e.Status):
		s = Step{Action: Approve}
	case e.Status == store.Scheduled:
		s = Step{Action: RunNow}
	default:
		return Step{Leave: LeaveNothing}, nil
	}
	kept, err := denied(auth.May(ctx, authority.Actor{Name: by.Name, Role: authority.Operator}, authority.Approve, e))
	if err != nil {
		return Step{}, err
	}
	if kept && !optedIn(include, e) {
		return Step{Leave: LeaveExcluded}, nil
	}
	no, err := denied(auth.May(ctx, by, actions[s.Action], e))
	if err != nil {
		return Step{}, err
	}
	if no {
		return Step{Leave: LeaveDenied}, nil
	}
	return s, nil
}

// denied reads the authority rule's answer: a refusal, or an error that is
// none (the policy could not be read).
func denied(err error) (bool, error) {
	if err == nil {
		return false, nil
	}
	if errors.Is(err, authority.ErrPermissionDenied) {
		return true, nil
	}
	return false, err
}

// RuleOf is the name a plan counts an entry's rule by: the rule, or for an
// entry that names none its category, whose default then decides.
func RuleOf(e *store.Entry) string { return cmp.Or(e.Rule, e.Category) }

// Bucket is a token bucket of one token: at most rate actions per second,
// no bursts.
type Bucket struct {
	interval time.Duration
	next     time.Time
}

// NewBucket returns a bucket for rate actions per second.
func NewBucket(rate float64) *Bucket {
	// A rate below MinRate (a run stored before it was checked) waits the
	// longest interval there is rather than overflow into no wait at all.
	interval := float64(time.Second) / rate
	if !(interval >= 0 && interval < math.MaxInt64) {
		return &Bucket{interval: math.MaxInt64}
	}
	return &Bucket{interval: time.Duration(interval)}
}

// Wait blocks until the next action may go, or ctx ends.
func (b *Bucket) Wait(ctx context.Context) error {
	now := time.Now()
	if b.next.After(now) {
		t := time.NewTimer(b.next.Sub(now))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now = b.next
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.next = now.Add(b.interval)
	return nil
}

// Summary is the counters in words.
func Summary(p *store.RedriveProgress) string {
	return fmt.Sprintf("%d approved, %d run now, %d skipped, %d failed, %d left alone", p.Approved, p.RunNow, p.Skipped, p.Failed, p.LeftAlone)
}

// Tally adds an action's outcome to the counters and reports whether its
// error is worth reporting (the caller says so where it reports): a
// failure, or an action recorded whose replay task is left to reconcile
// (operator.ErrTaskNotCreated), which counts as done: the entry moved.
func Tally(p *store.RedriveProgress, action string, err error) (report bool) {
	switch {
	case (err == nil || errors.Is(err, operator.ErrTaskNotCreated)) && action == Approve:
		p.Approved++
		return err != nil
	case err == nil || errors.Is(err, operator.ErrTaskNotCreated):
		p.RunNow++
		return err != nil
	case errors.Is(err, store.ErrWrongStatus), errors.Is(err, store.ErrNotFound):
		// Changed since it was listed (a replay, another operator): not
		// ours to redo.
		p.Skipped++
	case errors.Is(err, authority.ErrPermissionDenied):
		// The policy changed since it was listed: the entry's rule no
		// longer lets the actor's role act. Left as it is, and said.
		p.Skipped++
		return true
	default:
		p.Failed++
		return true
	}
	return false
}

// ActedSince reports whether by (a name) took a redrive's action on the
// entry after since: a move into scheduled, which approve and run now both
// make. Any other move of theirs (a discard by hand meanwhile) is not the
// redrive's.
func ActedSince(e *store.Entry, by string, since time.Time) bool {
	for _, h := range e.History {
		if h.By == by && h.At.After(since) && h.To == string(store.Scheduled) {
			return true
		}
	}
	return false
}
