package console

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the entry page and the actions its forms post.

// entryData is the entry page.
type entryData struct {
	E *store.Entry
	// Payload is the version Shown (?version=N, ShownParam; else the one
	// the next replay publishes, Next), of Versions. Edit is Next's, the
	// approve form's base.
	Payload    payloadView
	Versions   []versionLine
	Shown      int
	ShownParam bool
	Next       store.PayloadVersion
	Edit       payloadView
	Headers    []headerLine
	Chain      []*store.Entry
	Task       string
	Approvable bool
	Runnable   bool
	Discard    bool
	Probe      bool
	// NotMine says why an action the entry's status offers is not the
	// operator's (the authority rule's refusals), for the forms not shown.
	NotMine    []string
	RawPayload string
	HeaderText string
}

type headerLine struct{ Name, Value string }

func (s *Server) entry(r *http.Request) (string, string, any, error) {
	id, err := pathEntry(r.PathValue("entry"))
	if err != nil {
		return "", "", nil, err
	}
	chunk, err := chunkParam(r)
	if err != nil {
		return "", "", nil, err
	}
	version, err := versionParam(r)
	if err != nil {
		return "", "", nil, uiBad("%v", err)
	}
	e, err := s.store.Get(r.Context(), id)
	if err != nil {
		return "", "", nil, err
	}
	d := entryData{E: e, ShownParam: version != 0}
	var payload []byte
	if d.Versions, payload, d.Shown, err = s.entryVersions(r.Context(), e, version); err != nil {
		return "", "", nil, err
	}
	if d.Payload, err = viewPayload(payload, chunk); err != nil {
		return "", "", nil, uiBad("%v", err)
	}
	if d.Next, err = e.ReplayVersion(); err != nil {
		return "", "", nil, err
	}
	if d.Next.N != d.Shown {
		if payload, err = s.store.VersionPayload(r.Context(), e, d.Next.N); err != nil {
			return "", "", nil, err
		}
	}
	if d.Edit, _ = viewPayload(payload, 1); d.Edit.Editable {
		d.RawPayload = string(payload)
	}
	for name, vs := range e.Headers {
		for _, v := range vs {
			d.Headers = append(d.Headers, headerLine{decodeHeader(name), decodeHeader(v)})
		}
	}
	sortHeaders(d.Headers)
	if e.RootID != "" {
		p, err := s.store.Entries(r.Context(), store.Query{RootID: e.RootID, View: store.ListView, Limit: 50})
		if err != nil {
			return "", "", nil, err
		}
		d.Chain = p.Entries
		sort.SliceStable(d.Chain, func(i, j int) bool { return d.Chain[i].CreatedAt.Before(d.Chain[j].CreatedAt) })
	}
	// The replay task in words: its name and whether Cloud Tasks still
	// has it, or why the entry has none.
	switch {
	case e.TaskName == "" && e.Status == store.Held:
		d.Task = "none: held by its tenant's breaker, which releases it"
	case e.TaskName == "" && e.Status.Terminal():
		d.Task = "none: the entry is " + string(e.Status)
	case e.TaskName == "":
		d.Task = "none"
	case s.tasks == nil:
		d.Task = "its state in Cloud Tasks is not known to this console"
	}
	if s.tasks != nil && e.TaskName != "" {
		ok, err := s.tasks.Exists(r.Context(), e.TaskName)
		switch {
		case err != nil:
			d.Task = "unknown (" + err.Error() + ")"
		case ok:
			d.Task = "queued"
		default:
			d.Task = "not in the queue"
		}
	}
	if err := s.offerForms(r, e, &d); err != nil {
		return "", "", nil, err
	}
	return "entry", "Entry " + e.ID, d, nil
}

// chunkParam reads the entry page's ?chunk=N (1-based; 1 when absent).
func chunkParam(r *http.Request) (int, error) {
	vs, ok := r.URL.Query()["chunk"]
	if !ok {
		return 1, nil
	}
	if len(vs) != 1 {
		return 0, uiBad("chunk: one value")
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < 1 {
		return 0, uiBad("chunk %q is not a chunk number (1, 2, …)", vs[0])
	}
	return n, nil
}

// decodeHeader shows a stored header name or value as sent (the store
// keeps them encoded, event.EncodeHeader).
func decodeHeader(s string) string {
	d, err := event.DecodeHeader(s)
	if err != nil {
		return s
	}
	return d
}

func has(list []store.Status, st store.Status) bool {
	for _, x := range list {
		if x == st {
			return true
		}
	}
	return false
}

// entryAction runs replay, approve (preview, then confirm), discard and
// probe on an entry.
func (s *Server) entryAction(w http.ResponseWriter, r *http.Request, who authority.Actor) (string, error) {
	id, err := pathEntry(r.PathValue("entry"))
	if err != nil {
		return "", err
	}
	back, err := consolePath("entries", id)
	if err != nil {
		return "", err
	}
	ctx := r.Context()
	switch r.PathValue("action") {
	case "replay":
		_, err := s.actions.ReplayNow(ctx, store.AllTenants, id, who)
		return s.recorded(r, err, back, "replay-requested", "replay-task-pending")
	case "discard":
		reason, err := reasonOf(r.PostFormValue("reason"), "a discard")
		if err != nil {
			return "", err
		}
		if r.PostFormValue("confirm") != "yes" {
			return "", uiBad("a discard needs its confirmation box ticked: it cannot be undone")
		}
		if _, err := s.actions.Discard(ctx, store.AllTenants, id, reason, who); err != nil {
			return "", err
		}
		return back + "?done=discarded", nil
	case "probe":
		reason, err := reasonOf(r.PostFormValue("reason"), "a breaker probe")
		if err != nil {
			return "", err
		}
		_, err = s.actions.ProbeNow(ctx, store.AllTenants, id, who, reason)
		return s.recorded(r, err, back, "probe-sent", "replay-task-pending")
	case "approve":
		return s.approve(w, r, who, id, back)
	}
	return "", &uiError{http.StatusNotFound, "no such action"}
}
