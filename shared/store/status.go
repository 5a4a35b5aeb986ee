package store

import (
	"fmt"
	"slices"
)

// This file is the status table (docs/storage.md, "Status machine"): what
// each status means to the components and people that ask (needs a human,
// settled, a replay pending) and every move between statuses, named by why
// it is made. It is the one place either is written: callers ask it, and
// the store's transitions (move, in entry.go) refuse what it does not allow.

// Status of an entry.
type Status string

// Statuses.
const (
	Scheduled        Status = "scheduled"
	Replaying        Status = "replaying"
	Replayed         Status = "replayed"
	Recovered        Status = "recovered"
	AwaitingApproval Status = "awaiting_approval"
	Quarantined      Status = "quarantined"
	Held             Status = "held"
	Escalated        Status = "escalated"
	Discarded        Status = "discarded"
)

// statusFacts are what a status means.
type statusFacts struct {
	// needsHuman: the entry waits for a person's decision (approve or
	// discard); moving into it is notified (notifications.go) and the
	// triage agent is asked.
	needsHuman bool
	// settled: nothing more happens to the entry by itself (recovered, or
	// left to people, or given up); resolved_at is set while it is in one.
	settled bool
	// pending: a replay is wanted and not yet published.
	pending bool
	// keepsTask: the replay task the entry's task_name names is still
	// the entry's.
	keepsTask bool
}

type statusRow struct {
	Status
	statusFacts
}

// statuses is the table: every status, in the order AllStatuses lists them.
var statuses = []statusRow{
	{Scheduled, statusFacts{pending: true, keepsTask: true}},
	{Replaying, statusFacts{pending: true, keepsTask: true}},
	{Replayed, statusFacts{}},
	{Recovered, statusFacts{settled: true, keepsTask: true}},
	{AwaitingApproval, statusFacts{needsHuman: true}},
	{Quarantined, statusFacts{needsHuman: true, settled: true}},
	{Held, statusFacts{pending: true}},
	{Escalated, statusFacts{needsHuman: true, settled: true}},
	{Discarded, statusFacts{settled: true}},
}

func (st Status) facts() statusFacts {
	for _, s := range statuses {
		if s.Status == st {
			return s.statusFacts
		}
	}
	return statusFacts{}
}

// AllStatuses are every status an entry can be in.
var AllStatuses = StatusesWhere(func(Status) bool { return true })

// StatusesWhere are the statuses of which pred holds, in table order (what a
// query's Statuses, a count's InStatus or a filter's choice takes).
func StatusesWhere(pred func(Status) bool) []Status {
	var out []Status
	for _, s := range statuses {
		if pred(s.Status) {
			out = append(out, s.Status)
		}
	}
	return out
}

// Known reports whether st is one of AllStatuses (what an operator's filter
// may name).
func (st Status) Known() bool {
	return slices.ContainsFunc(statuses, func(s statusRow) bool { return s.Status == st })
}

// NeedsHuman reports whether an entry in st waits for a person: awaiting
// approval, quarantined, escalated. A move into one is notified, and each
// is what an approval starts from (MoveApprove).
func (st Status) NeedsHuman() bool { return st.facts().needsHuman }

// Settled reports whether nothing more happens to an entry in st by itself:
// recovered, or left to people or given up (escalated, quarantined,
// discarded). An entry has a resolved_at exactly while it is settled, and a
// window's recovery rate counts the settled entries (Recovery).
func (st Status) Settled() bool { return st.facts().settled }

// AsksTriage reports whether a move into st also asks the triage agent
// (escalated, awaiting approval): its notification's kind says so.
func (st Status) AsksTriage() bool { return st.NeedsHuman() && entryKinds[st].Triage() }

// Pending reports whether a replay of an entry in st is wanted and not yet
// published: scheduled, replaying, or held by its tenant's breaker.
func (st Status) Pending() bool { return st.facts().pending }

// KeepsTask reports whether the replay task an entry in st names is still
// the entry's: it is due (scheduled), running (replaying), or it recovered
// the entry and a redelivery of it finishes that recovery (recovered). The
// replay's claim reads an entry in any of them; reconcile deletes the task
// of an entry in any other status as an orphan.
func (st Status) KeepsTask() bool { return st.facts().keepsTask }

// Terminal reports whether no move leaves st (recovered, discarded).
func (st Status) Terminal() bool {
	return !slices.ContainsFunc(Moves, func(m Move) bool { return slices.Contains(m.From, st) })
}

// Move is a named kind of status change: the statuses it starts from and
// those it may lead to. A caller that makes one asks it for its From
// (narrowed to what the caller saw, never widened).
type Move struct {
	Name string
	From []Status
	To   []Status
}

// The moves. Every status change an entry makes is one of them.
var (
	// MoveClaim: the replay function takes the entry for its task.
	MoveClaim = Move{"claim", []Status{Scheduled}, []Status{Replaying}}
	// MovePublish: the replay published the task.
	MovePublish = Move{"publish", []Status{Replaying}, []Status{Replayed}}
	// MoveGate: the replay stops short of a publish: the current policy
	// says otherwise (StatusFor), the breaker holds it, or there is nothing
	// it can publish (escalated).
	MoveGate = Move{"gate", []Status{Replaying}, []Status{Held, AwaitingApproval, Quarantined, Escalated, Discarded}}
	// MoveRecover: the task's completion record exists (the replay found it
	// before publishing, or reconcile and a later replay of the chain after).
	MoveRecover = Move{"recover", []Status{Replaying, Replayed}, []Status{Recovered}}
	// MoveRequeue: reconcile gives a scheduled entry whose task is lost, or
	// a replay stuck mid-way, a new task.
	MoveRequeue = Move{"requeue", []Status{Scheduled, Replaying}, []Status{Scheduled}}
	// MoveRelease: reconcile releases a held entry its breaker admits.
	MoveRelease = Move{"release", []Status{Held}, []Status{Scheduled}}
	// MoveApprove: a person (or the triage agent) approves a replay of an
	// entry that waits for one (NeedsHuman). Not held: an approval answers
	// the policy, and a held entry waits for its breaker, not the policy.
	MoveApprove = Move{"approve", StatusesWhere(Status.NeedsHuman), []Status{Scheduled}}
	// MoveDiscard: a person gives an entry up: any that is neither settled
	// by a replay (recovered) nor mid-replay (replaying), nor discarded.
	MoveDiscard = Move{"discard", []Status{Scheduled, AwaitingApproval, Quarantined, Held, Escalated, Replayed}, []Status{Discarded}}
	// MoveRunNow: a person runs a scheduled replay now, or releases a held
	// one now (it still meets the breaker and the policy when it runs).
	MoveRunNow = Move{"run now", []Status{Scheduled, Held}, []Status{Scheduled}}
	// MoveProbe: a person sends the entry as its half-open breaker's probe.
	MoveProbe = Move{"breaker probe", []Status{Held, Scheduled}, []Status{Scheduled}}
	// MoveNewAttempt: a scheduled entry's spent task is replaced by the next
	// attempt's.
	MoveNewAttempt = Move{"new attempt", []Status{Scheduled}, []Status{Scheduled}}
)

// Moves are every move, the transitions the table allows.
var Moves = []Move{MoveClaim, MovePublish, MoveGate, MoveRecover, MoveRequeue, MoveRelease, MoveApprove, MoveDiscard, MoveRunNow, MoveProbe, MoveNewAttempt}

// Allows reports whether m moves an entry from from to to.
func (m Move) Allows(from, to Status) bool {
	return slices.Contains(m.From, from) && slices.Contains(m.To, to)
}

// Only is m's From narrowed to only (what the caller saw); all of From when
// only is empty. A status of only that m does not start from is dropped:
// narrowing never widens the move.
func (m Move) Only(only ...Status) []Status {
	if len(only) == 0 {
		return m.From
	}
	var out []Status
	for _, st := range only {
		if slices.Contains(m.From, st) {
			out = append(out, st)
		}
	}
	return out
}

// CanMove reports whether some move takes an entry from st to to.
func (st Status) CanMove(to Status) bool {
	return slices.ContainsFunc(Moves, func(m Move) bool { return m.Allows(st, to) })
}

// TransitionError is a status change the table does not allow (ErrTransition).
type TransitionError struct {
	Entry    string
	From, To Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("%v: entry %q from %s to %s", ErrTransition, e.Entry, e.From, e.To)
}

func (e *TransitionError) Unwrap() error { return ErrTransition }
