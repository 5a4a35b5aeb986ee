package store

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// Each status's meaning, as the table answers every caller (operator,
// notifications, reconcile's tenant health, dlqctl stats, the demo).
func TestStatusPredicates(t *testing.T) {
	type facts struct{ NeedsHuman, Settled, Pending, KeepsTask, Terminal, AsksTriage, Notifies, Known bool }
	want := map[Status]facts{
		Scheduled:        {Pending: true, KeepsTask: true, Known: true},
		Replaying:        {Pending: true, KeepsTask: true, Known: true},
		Replayed:         {Known: true},
		Recovered:        {Settled: true, KeepsTask: true, Terminal: true, Known: true},
		AwaitingApproval: {NeedsHuman: true, AsksTriage: true, Notifies: true, Known: true},
		Quarantined:      {NeedsHuman: true, Settled: true, Notifies: true, Known: true},
		Held:             {Pending: true, Known: true},
		Escalated:        {NeedsHuman: true, Settled: true, AsksTriage: true, Notifies: true, Known: true},
		Discarded:        {Settled: true, Terminal: true, Known: true},
		"bogus":          {Terminal: true},
	}
	for st, w := range want {
		got := facts{st.NeedsHuman(), st.Settled(), st.Pending(), st.KeepsTask(), st.Terminal(), st.AsksTriage(), Notifies(st), st.Known()}
		if got != w {
			t.Errorf("facts(%s) = %+v, want %+v", st, got, w)
		}
	}
	known := slices.DeleteFunc(slices.Sorted(maps.Keys(want)), func(st Status) bool { return !want[st].Known })
	if got := slices.Sorted(slices.Values(AllStatuses)); !slices.Equal(got, known) {
		t.Errorf("AllStatuses = %v, want %v", got, known)
	}
	// A status that needs a human is notified with a kind of its own.
	if got, want := slices.Sorted(maps.Keys(entryKinds)), slices.Sorted(slices.Values(StatusesWhere(Status.NeedsHuman))); !slices.Equal(got, want) {
		t.Errorf("notified statuses = %v, want the statuses that need a human %v", got, want)
	}
	if got, want := SettledStatuses, []Status{Recovered, Quarantined, Escalated, Discarded}; !slices.Equal(got, want) {
		t.Errorf("SettledStatuses = %v, want %v", got, want)
	}
	// Where the policy sends a new entry is a status it may start in, and
	// a re-evaluation's gate may send a claimed entry there too.
	for _, a := range []triage.Action{triage.AutoReplay, triage.Quarantine, triage.RequireApproval, triage.ManualReview, triage.Discard, triage.Escalate, "unheard_of"} {
		st := StatusFor(a)
		if !st.Known() || (a != triage.AutoReplay && !MoveGate.Allows(Replaying, st)) {
			t.Errorf("StatusFor(%s) = %s, want a known status the replay's gate may move to", a, st)
		}
	}
}

// Every move the status table allows, from → to, and none other.
func TestStatusTransitions(t *testing.T) {
	allowed := map[Status][]Status{
		Scheduled:        {Scheduled, Replaying, Discarded},
		Replaying:        {Scheduled, Replayed, Recovered, AwaitingApproval, Quarantined, Held, Escalated, Discarded},
		Replayed:         {Recovered, Discarded},
		Recovered:        nil,
		AwaitingApproval: {Scheduled, Discarded},
		Quarantined:      {Scheduled, Discarded},
		Held:             {Scheduled, Discarded},
		Escalated:        {Scheduled, Discarded},
		Discarded:        nil,
	}
	for _, from := range AllStatuses {
		got := StatusesWhere(from.CanMove)
		want := StatusesWhere(func(to Status) bool { return slices.Contains(allowed[from], to) })
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("CanMove(%s, ·) (-want +got):\n%s", from, diff)
		}
	}
	// The operator's actions and reconcile's repairs, by their moves.
	for _, tc := range []struct {
		move     Move
		from, to []Status
	}{
		{MoveClaim, []Status{Scheduled}, []Status{Replaying}},
		{MovePublish, []Status{Replaying}, []Status{Replayed}},
		{MoveRecover, []Status{Replaying, Replayed}, []Status{Recovered}},
		{MoveApprove, []Status{AwaitingApproval, Quarantined, Escalated}, []Status{Scheduled}},
		{MoveDiscard, []Status{Scheduled, AwaitingApproval, Quarantined, Held, Escalated, Replayed}, []Status{Discarded}},
		{MoveRunNow, []Status{Scheduled, Held}, []Status{Scheduled}},
		{MoveRelease, []Status{Held}, []Status{Scheduled}},
		{MoveRequeue, []Status{Scheduled, Replaying}, []Status{Scheduled}},
	} {
		if !slices.Equal(tc.move.From, tc.from) || !slices.Equal(tc.move.To, tc.to) {
			t.Errorf("%s = %v -> %v, want %v -> %v", tc.move.Name, tc.move.From, tc.move.To, tc.from, tc.to)
		}
	}
	// Narrowing never widens a move.
	for _, tc := range []struct {
		only []Status
		want []Status
	}{
		{nil, MoveRunNow.From},
		{[]Status{Held}, []Status{Held}},
		{[]Status{Escalated}, nil},
		{[]Status{Escalated, Scheduled}, []Status{Scheduled}},
	} {
		if got := MoveRunNow.Only(tc.only...); !slices.Equal(got, tc.want) {
			t.Errorf("MoveRunNow.Only(%v) = %v, want %v", tc.only, got, tc.want)
		}
	}
}

// The store refuses a move the table does not allow where it writes it,
// whichever transition function is asked, and writes nothing; a caller's
// From that names the status does not widen the table.
func TestTransitionRefusesWhatTheTableDoesNot(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	if _, err := s.Record(ctx, entry("TASKS.1", []byte(`{}`)), "classify"); err != nil {
		t.Fatal(err)
	}
	seen, err := s.GetMeta(ctx, "TASKS.1")
	if err != nil {
		t.Fatal(err)
	}
	for name, move := range map[string]func(Change) (*Entry, error){
		"Transition":     func(c Change) (*Entry, error) { return s.Transition(ctx, "TASKS.1", c) },
		"TransitionSeen": func(c Change) (*Entry, error) { return s.TransitionSeen(ctx, seen, c) },
		"MarkRecovered": func(c Change) (*Entry, error) {
			return s.MarkRecovered(ctx, "TASKS.1", c.From, c.By, c.Note)
		},
	} {
		for _, to := range []Status{Recovered, Escalated, Replayed} {
			if name == "MarkRecovered" && to != Recovered {
				continue
			}
			_, err := move(Change{From: AllStatuses, To: to, By: "test"})
			var te *TransitionError
			if !errors.Is(err, ErrTransition) || !errors.As(err, &te) || te.From != Scheduled || te.To != to {
				t.Errorf("%s(scheduled -> %s) = %v, want a TransitionError", name, to, err)
			}
		}
	}
	got, err := s.GetMeta(ctx, "TASKS.1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != Scheduled || len(got.History) != 1 || !got.UpdatedAt.Equal(seen.UpdatedAt) {
		t.Errorf("after refused moves: %s with %d transitions, updated %v; want scheduled, 1, %v", got.Status, len(got.History), got.UpdatedAt, seen.UpdatedAt)
	}
	if _, err := s.Transition(ctx, "TASKS.1", Change{From: MoveClaim.From, To: Replaying, By: "test"}); err != nil {
		t.Errorf("Transition(scheduled -> replaying) = %v, want the claim", err)
	}
}
