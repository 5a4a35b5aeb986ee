package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jsdlq/jsdlq/shared/store"
)

// This file holds the rules an approval's edits meet before anything
// changes: the header names an edit may set, and the risks of an edited
// payload its approver must confirm (docs/replay.md, "Payload versions").
// The console checks them at its preview with the same functions, so an
// operator learns of a refusal with the edit still in the form.

// ErrUnconfirmed is an edit with a risk its approver did not confirm. It
// is an ErrBadEdit too.
var ErrUnconfirmed = errors.New("operator: the edit needs an explicit confirmation")

// Risk is what an edited payload risks, which its approver confirms
// explicitly (Edits.Confirm); the version records the risks confirmed.
type Risk string

// Risks of an edit.
const (
	// RiskEmpty: the replay carries an empty (or blank) message.
	RiskEmpty Risk = "empty"
	// RiskInvalidJSON: the payload was JSON and the edit is not.
	RiskInvalidJSON Risk = "invalid_json"
)

// Warning is a risk of an edit, explained.
type Warning struct {
	Risk Risk
	Text string
}

// Risks are the risks of replacing base (nil when it is not known: a
// missing payload) with edit: an empty or blank edit, or, for a base that
// is JSON, an edit that is not (with where its syntax breaks).
func Risks(base, edit []byte) []Warning {
	switch {
	case len(edit) == 0:
		return []Warning{{RiskEmpty, "the edited payload is empty: the replay would carry an empty message"}}
	case len(bytes.TrimSpace(edit)) == 0:
		return []Warning{{RiskEmpty, fmt.Sprintf("the edited payload is blank (%d bytes of white space): the replay would carry no content", len(edit))}}
	case json.Valid(base) && !json.Valid(edit):
		return []Warning{{RiskInvalidJSON, "the payload was JSON and the edit is not: " + jsonError(edit)}}
	}
	return nil
}

// jsonError says where p stops being JSON.
func jsonError(p []byte) string {
	var v any
	err := json.Unmarshal(p, &v)
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line := 1 + bytes.Count(p[:min(int(syn.Offset), len(p))], []byte("\n"))
		return fmt.Sprintf("%v (line %d, byte %d)", syn, line, syn.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return "invalid JSON"
}

// Unconfirmed refuses warnings whose risk is not in confirmed, with
// ErrUnconfirmed naming each; it returns the risks confirmed, for the
// version to record.
func Unconfirmed(warnings []Warning, confirmed []Risk) ([]string, error) {
	var taken, missing []string
	for _, w := range warnings {
		if slices.Contains(confirmed, w.Risk) {
			taken = append(taken, string(w.Risk))
		} else {
			missing = append(missing, fmt.Sprintf("%s (confirm %q)", w.Text, w.Risk))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %w: %s", ErrBadEdit, ErrUnconfirmed, strings.Join(missing, "; "))
	}
	return taken, nil
}

// CheckHeaders refuses header edits no approval may make (ErrBadEdit):
// names replay owns (Nats-*, Jsdlq-*), the task's identity, malformed names
// and values with line breaks.
func CheckHeaders(h map[string]string) error {
	_, err := checkHeaders(h)
	return err
}

// checkRisks reads the payload version the entry replays (scoped to
// tenant), refuses ed's payload if a risk of it is not confirmed, and
// returns the version's number and the risks confirmed.
func (o *Operator) checkRisks(ctx context.Context, tenant, id string, ed Edits) (int, []string, error) {
	e, err := o.store.GetMeta(ctx, id)
	if err == nil && tenant != store.AllTenants && e.Tenant != tenant {
		err = fmt.Errorf("%w: entry %q", ErrNotFound, id)
	}
	if err != nil {
		return 0, nil, err
	}
	v, err := e.ReplayVersion()
	if err != nil {
		return 0, nil, err
	}
	if ed.Base != 0 && ed.Base != v.N {
		return 0, nil, fmt.Errorf("%w: entry %s replays payload version %d now, not version %d the edit was made on", ErrWrongStatus, id, v.N, ed.Base)
	}
	base, err := o.store.VersionPayload(ctx, e, v.N)
	if errors.Is(err, store.ErrCorrupt) {
		// Unknown bytes (a lost chunk): the edit supplies the payload, and
		// only its own risks can be judged.
		base, err = nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	confirmed, err := Unconfirmed(Risks(base, ed.Payload), ed.Confirm)
	return v.N, confirmed, err
}
