package store

import (
	"errors"
	"strings"
	"testing"
)

// FuzzEntryID checks the event id → Firestore document id mapping on any
// input: a refusal wraps ErrBadID; an accepted id is a legal document id
// (no '/', at most MaxIDBytes, not "." or "..", not __reserved__) and EventID
// inverts it.
func FuzzEntryID(f *testing.F) {
	for _, s := range []string{"TASKS.42", "..", ".", "__x__.1", "A/B.1", "%41.2", strings.Repeat("é", 600), "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, eventID string) {
		id, err := EntryID(eventID)
		if refused(t, "EntryID", eventID, err) {
			return
		}
		if id == "" || id == "." || id == ".." || strings.Contains(id, "/") || len(id) > MaxIDBytes ||
			strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__") {
			t.Fatalf("EntryID(%q) = %q is not a legal Firestore document id", eventID, id)
		}
		back, err := EventID(id)
		if err != nil || back != eventID {
			t.Fatalf("EventID(EntryID(%q)) = %q, %v", eventID, back, err)
		}
	})
}

// FuzzEventID feeds arbitrary document ids (reconcile and dlqctl read ids of
// documents that anyone with console access may have created by hand).
// Properties: a refusal wraps ErrBadID; an accepted id is the canonical
// encoding of what it decodes to, so two documents never decode to the same
// event id or tenant and reconcile never acts on one while reading the other.
func FuzzEventID(f *testing.F) {
	for _, s := range []string{"TASKS.42", "%2E.", "%2a", "%41", "%", "%4", "%zz", "A%2FB.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, docID string) {
		ev, err := EventID(docID)
		if refused(t, "EventID", docID, err) {
			return
		}
		if again, err := EntryID(ev); err != nil || again != docID {
			t.Fatalf("EventID(%q) = %q, whose document id is %q (%v): not canonical", docID, ev, again, err)
		}
	})
}

// refused reports whether fn refused in; a refusal must wrap ErrBadID, the
// one error callers test for.
func refused(t *testing.T, fn, in string, err error) bool {
	t.Helper()
	if err != nil && !errors.Is(err, ErrBadID) {
		t.Fatalf("%s(%q) error %v does not wrap ErrBadID", fn, in, err)
	}
	return err != nil
}
