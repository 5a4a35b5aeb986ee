package console

import (
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the approve flow of the entry page: the edit form, the
// preview (the edit as a line diff against the version it edits, the
// headers set, the risks to confirm) and the confirmation. An edit is a new
// payload version (docs/console.md, "Approving with edits"); an edit
// refused at the preview comes back in its form with the refusal beside
// it, never lost with an error page.

// approveData is the approve page: an edit's preview, or (Editing) the
// edit form again with the refusal that stopped it.
type approveData struct {
	E *store.Entry
	// Base is the version the edit is made on (the one the entry
	// replays); Next is the number an edit makes.
	Base store.PayloadVersion
	Next int
	// NewVersion: the approval makes version Next (a payload or header
	// edit); otherwise it replays Base as it is.
	NewVersion  bool
	Diff        []diffLine
	HeaderSets  []headerLine
	Payload     string
	Headers     string
	PayloadKept bool
	// PayloadField: the form carries a payload (Base is editable here).
	PayloadField bool
	// Since is when the entry entered the status the preview shows
	// (RFC 3339): the confirmation approves that decision only.
	Since string
	// Risks are what the edit risks; each needs its box ticked.
	Risks []riskBox
	// Editing: the edit was refused at the preview; the page is its form.
	Editing bool
	Error   string
}

// riskBox is a risk of the edit with its confirmation box.
type riskBox struct {
	operator.Warning
	Checked bool
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, who authority.Actor, id, back string) (string, error) {
	ctx := r.Context()
	// The form's own fields (the preview's, not the operator's typing)
	// are read before anything else: a malformed one is a 400 before any
	// I/O.
	ed, err := approveFields(r, who)
	if err != nil {
		return "", err
	}
	e, err := s.store.Get(ctx, id)
	if err != nil {
		return "", err
	}
	// A role the entry's rule does not grant is refused at the preview
	// already (the confirmation asks again, on the entry it approves).
	if err := s.actions.May(ctx, who, authority.Approve, e); err != nil {
		return "", err
	}
	base, err := e.ReplayVersion()
	if err != nil {
		return "", err
	}
	baseBytes, err := s.store.VersionPayload(ctx, e, base.N)
	if err != nil {
		return "", err
	}
	d := approveData{E: e, Base: base, Next: len(e.Versions()) + 1, Headers: r.PostFormValue("headers"), Since: r.PostFormValue("since")}
	if n := len(e.History); d.Since == "" && n > 0 {
		d.Since = e.History[n-1].At.Format(time.RFC3339Nano)
	}
	// Only a payload the form carries is an edit: the entry page has no
	// payload field for one it cannot edit (binary, or more than a chunk),
	// and a field left out keeps the payload, never empties it.
	d.PayloadKept = true
	if _, sent := r.PostForm["payload"]; sent {
		if v, err := viewPayload(baseBytes, 1); err != nil || !v.Editable {
			return "", uiBad("the payload of %s cannot be edited here (%s); approve without a payload field to keep it", id, v.Kind)
		}
		d.PayloadField = true
		d.Payload = strings.ReplaceAll(r.PostFormValue("payload"), "\r\n", "\n")
		d.PayloadKept = d.Payload == strings.ReplaceAll(string(baseBytes), "\r\n", "\n")
	}
	if !d.PayloadKept {
		ed.Payload = []byte(d.Payload)
	}
	headers, err := parseHeaderEdits(d.Headers)
	if err == nil {
		err = operator.CheckHeaders(headers)
	}
	if err == nil && ed.Base != 0 && ed.Base != base.N && slices.Contains(operator.Approvable, e.Status) {
		// Approved and refused again meanwhile: the edit is shown against
		// the version the entry replays now. (Not approvable at all: the
		// approval answers that, a 409.)
		err = errors.New("the entry replays payload version " + strconv.Itoa(base.N) + " now (approved meanwhile); review your edit against it")
	}
	if err != nil {
		// Refused before anything changes: the form again, the edit as
		// the operator wrote it, the refusal beside it.
		d.Editing, d.Error = true, err.Error()
		s.render(w, http.StatusBadRequest, "approve", pageData{Title: "Approve " + id, Operator: who, CSRF: r.PostFormValue(csrfField), Body: d})
		return "", nil
	}
	ed.SetHeaders = headers
	if ed.Base == 0 {
		ed.Base = base.N
	}
	for name, v := range headers {
		d.HeaderSets = append(d.HeaderSets, headerLine{name, v})
	}
	sort.Slice(d.HeaderSets, func(i, j int) bool { return d.HeaderSets[i].Name < d.HeaderSets[j].Name })
	d.NewVersion = !d.PayloadKept || len(headers) > 0
	if !d.PayloadKept {
		was, _ := viewPayload(baseBytes, 1)
		now, _ := viewPayload(ed.Payload, 1)
		d.Diff = lineDiff(was.Text, now.Text)
		for _, w := range operator.Risks(baseBytes, ed.Payload) {
			d.Risks = append(d.Risks, riskBox{w, slices.Contains(ed.Confirm, w.Risk)})
		}
	} else {
		ed.Confirm = nil // no edit: nothing to confirm
	}
	page := pageData{Title: "Approve " + id, Operator: who, CSRF: r.PostFormValue(csrfField), Body: &d}
	if r.PostFormValue("step") != "confirm" {
		s.render(w, http.StatusOK, "approve", page)
		return "", nil
	}
	_, err = s.actions.Approve(ctx, store.AllTenants, id, ed)
	if errors.Is(err, operator.ErrUnconfirmed) {
		// A box left unticked: the preview again, with what to confirm.
		d.Error = err.Error()
		s.render(w, http.StatusBadRequest, "approve", page)
		return "", nil
	}
	return s.recorded(r, err, back, "approved", "approved-task-pending")
}

// approveFields reads the approve form's own fields into the edits of who:
// since (the moment the previewed decision was made), base (the version
// the edit was made on) and the ticked risks; a malformed one is a 400.
func approveFields(r *http.Request, who authority.Actor) (operator.Edits, error) {
	ed := operator.Edits{By: who}
	if v := r.PostFormValue("since"); v != "" {
		since, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return ed, uiBad("since %q is not a time", v)
		}
		// What the preview showed: an entry decided again since (escalated
		// anew after its approved replay was refused) is not approved by
		// a confirmation of the earlier question.
		ed.Asked = operator.Asked{EnteredAt: since}
	}
	if v := r.PostFormValue("base"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return ed, uiBad("base %q is not a payload version", v)
		}
		ed.Base = n
	}
	var err error
	ed.Confirm, err = risksConfirmed(r.PostForm["confirm"])
	return ed, err
}

// risksConfirmed reads the preview's ticked boxes: risks operator.Risks
// names, anything else a 400.
func risksConfirmed(vs []string) ([]operator.Risk, error) {
	var out []operator.Risk
	for _, v := range vs {
		switch r := operator.Risk(v); r {
		case operator.RiskEmpty, operator.RiskInvalidJSON:
			out = append(out, r)
		default:
			return nil, uiBad("confirm %q is not a risk an edit has", v)
		}
	}
	return out, nil
}

// parseHeaderEdits reads "Name: value" lines.
func parseHeaderEdits(text string) (map[string]string, error) {
	out := map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, uiBad("header edit %q is not Name: value", line)
		}
		out[strings.TrimSpace(name)] = strings.TrimSpace(v)
	}
	return out, nil
}
