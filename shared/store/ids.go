package store

import (
	"fmt"
	"net/url"
	"strings"
)

// MaxIDBytes is Firestore's limit on a document id.
const MaxIDBytes = 1500

// EntryID turns an event id ("<stream>.<stream_seq>") into a Firestore
// document id. It is reversible (EventID) and injective: bytes other than
// letters, digits, '.', '-' and '_' are percent-encoded, as is '%' itself;
// the ids Firestore reserves ("." "..", "__x__") get their first character
// encoded as well.
func EntryID(eventID string) (string, error) {
	if eventID == "" {
		return "", fmt.Errorf("%w: empty event id", ErrBadID)
	}
	var b strings.Builder
	for i := 0; i < len(eventID); i++ {
		c := eventID[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	id := b.String()
	if strings.Trim(id, ".") == "" || (strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__")) {
		id = fmt.Sprintf("%%%02X", id[0]) + id[1:]
	}
	if len(id) > MaxIDBytes {
		return "", fmt.Errorf("%w: event id of %d bytes encodes to %d bytes, more than Firestore's %d", ErrBadID, len(eventID), len(id), MaxIDBytes)
	}
	return id, nil
}

// EventID reverses EntryID.
func EventID(entryID string) (string, error) {
	ev, err := url.PathUnescape(entryID)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrBadID, entryID, err)
	}
	// Only the canonical encoding is accepted: "%41" or "%2a" (a document
	// made by hand) would otherwise decode to the id of another document,
	// and whoever acts on the decoded id would change that one instead.
	if canon, err := EntryID(ev); err != nil || canon != entryID {
		return "", fmt.Errorf("%w: %q is not the document id of an event id", ErrBadID, entryID)
	}
	return ev, nil
}
