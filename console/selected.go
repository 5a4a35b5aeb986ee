package console

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is "replay / discard selected" on the entries list: the rows an
// operator ticked, acted on one by one at the bulk rate cap. A replay takes
// the bulk engine's step for each (redrive.StepFor: approve or run now, or
// why it is left alone, by the same authority rule) and acts with
// redrive.Act; a discard is operator.DiscardIn, confirmed and with a
// reason. Each entry meets the gates as any action does.

// maxSelected bounds the rows one request acts on: a page's worth.
const maxSelected = DefaultPageSize

// selectedOutcome is what happened to one selected entry.
type selectedOutcome struct {
	ID, Status, Outcome string
	Done                bool
}

// selectedData is the answer page.
type selectedData struct {
	Action   string
	Outcomes []selectedOutcome
	Done     int
}

// leaveWords says why a replay left a selected entry alone.
var leaveWords = map[string]string{
	redrive.LeaveHeld:     "held by its tenant's breaker: a probe or the breaker's close releases it",
	redrive.LeaveExcluded: "its rule keeps approval for approvers",
	redrive.LeaveDenied:   "your role may not act on it",
	redrive.LeaveNothing:  "nothing to replay in its status",
}

func (s *Server) selectedAction(w http.ResponseWriter, r *http.Request, who authority.Actor) (string, error) {
	if err := r.ParseForm(); err != nil {
		return "", uiBad("malformed form")
	}
	var ids []string
	for _, v := range r.PostForm["id"] {
		id, err := pathEntry(v)
		if err != nil {
			return "", err
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", uiBad("select at least one entry")
	}
	if len(ids) > maxSelected {
		return "", uiBad("%d entries selected: at most %d at once (a bulk redrive takes more)", len(ids), maxSelected)
	}
	action := r.PostForm.Get("action")
	var reason string
	switch action {
	case "replay":
	case "discard":
		var err error
		if reason, err = reasonOf(r.PostForm.Get("reason"), "a discard"); err != nil {
			return "", err
		}
		if r.PostForm.Get("confirm") != "yes" {
			return "", uiBad("discarding %d entries needs the confirmation box ticked: a discard cannot be undone", len(ids))
		}
	default:
		return "", uiBad("action %q: replay or discard", action)
	}
	// An approver's selection takes in the entries whose rule keeps
	// approval for approvers: the rows were picked one by one.
	var include []string
	if mayOptIn(who) == nil {
		include = []string{redrive.OptInApproverRules}
	}
	ctx := r.Context()
	b := redrive.NewBucket(MaxBulkRate)
	d := selectedData{Action: action}
	for _, id := range ids {
		o, err := s.actOnSelected(ctx, b, who, id, action, reason, include)
		if err != nil {
			return "", err
		}
		if o.Done {
			d.Done++
		}
		d.Outcomes = append(d.Outcomes, o)
	}
	s.log.InfoContext(ctx, "selected entries acted on", "action", action, "operator", who.Name, "role", string(who.Role),
		"selected", len(ids), "done", d.Done)
	s.render(w, http.StatusOK, "selected", pageData{Title: "Selected entries: " + action, Operator: who, CSRF: s.csrfToken(w, r), Nav: "entries", Body: d})
	return "", nil
}

// actOnSelected acts on one selected entry; an error is returned only
// when the store fails (an entry's own refusal is its outcome).
func (s *Server) actOnSelected(ctx context.Context, b *redrive.Bucket, who authority.Actor, id, action, reason string, include []string) (selectedOutcome, error) {
	o := selectedOutcome{ID: id}
	e, err := s.store.GetMeta(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		o.Outcome = "not found"
		return o, nil
	}
	if err != nil {
		return o, err
	}
	o.Status = string(e.Status)
	if action == "discard" {
		if !has(operator.Discardable, e.Status) {
			o.Outcome = "not discarded: a " + string(e.Status) + " entry cannot be discarded"
			return o, nil
		}
		if err := b.Wait(ctx); err != nil {
			return o, err
		}
		_, err := s.actions.Discard(ctx, store.AllTenants, id, reason, who)
		return outcomeOf(o, "discarded", err)
	}
	step, err := redrive.StepFor(ctx, s.actions, who, e, include)
	if err != nil {
		return o, err
	}
	if step.Action == "" {
		o.Outcome = "left alone: " + leaveWords[step.Leave]
		return o, nil
	}
	if err := b.Wait(ctx); err != nil {
		return o, err
	}
	err = redrive.Act(ctx, s.actions, store.AllTenants, who, id, step.Action, e.Status)
	if errors.Is(err, operator.ErrTaskNotCreated) {
		o.Done, o.Outcome = true, step.Action+": recorded; its replay task is left to reconcile"
		return o, nil
	}
	return outcomeOf(o, map[string]string{redrive.Approve: "approved", redrive.RunNow: "replay requested"}[step.Action], err)
}

// outcomeOf reads an action's error as the entry's outcome: a refusal
// (moved on meanwhile, not the operator's) is shown, anything else fails
// the request.
func outcomeOf(o selectedOutcome, done string, err error) (selectedOutcome, error) {
	var denied *authority.Denied
	switch {
	case err == nil:
		o.Done, o.Outcome = true, done
	case errors.Is(err, store.ErrWrongStatus), errors.Is(err, store.ErrConflict):
		o.Outcome = "skipped: it moved on since the list was read"
	case errors.As(err, &denied):
		o.Outcome = "not yours: " + denied.Reason()
	case errors.Is(err, store.ErrNotFound):
		o.Outcome = "not found"
	default:
		return o, err
	}
	return o, nil
}
