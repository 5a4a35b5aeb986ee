package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

// approveEdit is an approval's move with an edit, as shared/operator makes it.
func approveEdit(t *testing.T, s *Store, id string, from Status, ed *Edit) (*Entry, error) {
	return s.TransitionScoped(testenv.Context(t), id, AllTenants, Change{From: []Status{from}, To: Scheduled, By: ed.By, Note: ApprovalNote + " by " + ed.By}, ed)
}

// versionBytes reads every version of id's payload.
func versionBytes(t *testing.T, s *Store, id string) (*Entry, [][]byte) {
	t.Helper()
	e, err := s.Get(testenv.Context(t), id)
	if err != nil {
		t.Fatalf("Get(%s) = %v", id, err)
	}
	var out [][]byte
	for _, v := range e.Versions() {
		b, err := s.VersionPayload(testenv.Context(t), e, v.N)
		if err != nil {
			t.Fatalf("VersionPayload(%s, %d) = %v", id, v.N, err)
		}
		out = append(out, b)
	}
	return e, out
}

// An edit is a new version; the original's bytes, size and sha256 are
// never rewritten, whatever their size or kind, and each version reads
// back byte for byte from its own description.
func TestEditsAreVersions(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 2*ChunkSize/16+3) // 3 chunks
	binary := []byte{0, 1, 2, 0xff, 0xfe, 0x80}
	tests := []struct {
		name     string
		original []byte
		edits    []Edit
		// chunks of each version (the original's PayloadChunkCount).
		chunks []int
	}{
		{"inline text, one edit", []byte(`{"a":1}`), []Edit{{Payload: []byte(`{"a":2}`)}}, []int{0, 1}},
		{"two edits: version 3 based on 2", []byte("one"), []Edit{{Payload: []byte("two")}, {Payload: []byte("three")}}, []int{0, 1, 1}},
		{"multi-chunk original, multi-chunk edit", big, []Edit{{Payload: append(bytes.Clone(big), 'x')}}, []int{3, 3}},
		{"binary original, binary edit", binary, []Edit{{Payload: append(bytes.Clone(binary), 0)}}, []int{0, 1}},
		{"cleared to empty", []byte("text"), []Edit{{Payload: []byte{}, Confirmed: []string{"empty"}}}, []int{0, 0}},
		{"headers only: the bytes are the inline original's", []byte("kept"), []Edit{{Headers: map[string]string{"X-A": "1"}}}, []int{0, 0}},
		{"headers only on a chunked edit", []byte("o"), []Edit{{Payload: big}, {Headers: map[string]string{"X-A": "1"}}}, []int{0, 3, 3}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("TASKS.v%d", i)
			e := entry(id, tt.original)
			e.Status = Escalated
			if _, err := s.Record(ctx, e, "classify"); err != nil {
				t.Fatal(err)
			}
			want := [][]byte{tt.original}
			for j, ed := range tt.edits {
				ed.By = fmt.Sprintf("op%d", j)
				got, err := approveEdit(t, s, id, Escalated, &ed)
				if err != nil {
					t.Fatalf("edit %d: TransitionScoped() = %v", j+1, err)
				}
				if _, err := refuse(t, s, id); err != nil {
					t.Fatal(err)
				}
				v, err := got.ReplayVersion()
				if err != nil || v.N != j+2 || v.Base != j+1 || v.By != ed.By {
					t.Errorf("edit %d: replay version = %+v, %v, want version %d based on %d by %s", j+1, v, err, j+2, j+1, ed.By)
				}
				note := got.History[len(got.History)-1].Note
				if want := fmt.Sprintf("payload v%d by %s from v%d", j+2, ed.By, j+1); !strings.Contains(note, want) {
					t.Errorf("edit %d: history note %q lacks %q", j+1, note, want)
				}
				next := want[len(want)-1]
				if ed.Payload != nil {
					next = ed.Payload
				}
				want = append(want, next)
			}
			got, payloads := versionBytes(t, s, id)
			if !bytes.Equal(got.Payload, tt.original) || got.PayloadSHA256 != PayloadSum(tt.original) || got.PayloadSize != int64(len(tt.original)) {
				t.Errorf("original after the edits = %d bytes sha256 %s, want the %d bytes sha256 %s unchanged", len(got.Payload), got.PayloadSHA256, len(tt.original), PayloadSum(tt.original))
			}
			if len(payloads) != len(want) {
				t.Fatalf("versions = %d, want %d", len(payloads), len(want))
			}
			for n := range want {
				v, _ := got.Version(n + 1)
				if !bytes.Equal(payloads[n], want[n]) || v.SHA256 != PayloadSum(want[n]) || v.Size != int64(len(want[n])) {
					t.Errorf("version %d = %d bytes (recorded %d B sha256 %s), want %d bytes sha256 %s", n+1, len(payloads[n]), v.Size, v.SHA256, len(want[n]), PayloadSum(want[n]))
				}
				if v.Chunks != tt.chunks[n] {
					t.Errorf("version %d has %d chunks, want %d", n+1, v.Chunks, tt.chunks[n])
				}
			}
		})
	}
}

// The headers a version sets are its own, on top of its bases'; the entry's
// own headers are never rewritten, and a set name replaces the stored one
// whatever its case or encoding.
func TestVersionHeaders(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	e := entry("TASKS.h1", []byte("p"))
	e.Status = Escalated
	e.Headers = map[string][]string{"X-Task-ID": {"t-1"}, "x-model": {"big"}, "X-Keep": {"k"}}
	if _, err := s.Record(ctx, e, "classify"); err != nil {
		t.Fatal(err)
	}
	if _, err := approveEdit(t, s, e.ID, Escalated, &Edit{By: "a", Headers: map[string]string{"X-Model": "small", "X-Raw": "\xff"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := refuse(t, s, e.ID); err != nil {
		t.Fatal(err)
	}
	got, err := approveEdit(t, s, e.ID, Escalated, &Edit{By: "b", Payload: []byte("q"), Headers: map[string]string{"X-Model": "tiny"}})
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := got.Version(2)
	v3, _ := got.ReplayVersion()
	tests := []struct {
		v    PayloadVersion
		want map[string][]string
	}{
		{PayloadVersion{N: 1}, map[string][]string{"X-Task-ID": {"t-1"}, "x-model": {"big"}, "X-Keep": {"k"}}},
		{v2, map[string][]string{"X-Task-ID": {"t-1"}, "X-Model": {"small"}, "X-Raw": {"jsdlq-b64:/w=="}, "X-Keep": {"k"}}},
		{v3, map[string][]string{"X-Task-ID": {"t-1"}, "X-Model": {"tiny"}, "X-Raw": {"jsdlq-b64:/w=="}, "X-Keep": {"k"}}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, got.HeadersOf(tt.v)); diff != "" {
			t.Errorf("HeadersOf(version %d) (-want +got):\n%s", tt.v.N, diff)
		}
	}
	if diff := cmp.Diff(e.Headers, got.Headers); diff != "" {
		t.Errorf("the entry's own headers changed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"X-Model", "X-Raw"}, v2.HeaderNames()); diff != "" {
		t.Errorf("HeaderNames(version 2) (-want +got):\n%s", diff)
	}
}

// Refused edits change nothing: an edit made on another version than the
// entry replays now, one past the version bound, a header edit on a
// missing payload, and one that would take the entry's document past
// Firestore's 1 MiB (an entry whose headers already fill most of it).
func TestRefusedEditsChangeNothing(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	record := func(id string, edit func(*Entry)) *Entry {
		e := entry(id, []byte("orig"))
		e.Status = Escalated
		if edit != nil {
			edit(e)
		}
		if _, err := s.Record(ctx, e, "classify"); err != nil {
			t.Fatal(err)
		}
		return e
	}
	record("TASKS.r1", nil)
	if _, err := approveEdit(t, s, "TASKS.r1", Escalated, &Edit{By: "a", Payload: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := refuse(t, s, "TASKS.r1"); err != nil {
		t.Fatal(err)
	}
	full := record("TASKS.r2", nil)
	for n := 2; n <= MaxPayloadVersions; n++ {
		if _, err := approveEdit(t, s, full.ID, Escalated, &Edit{By: "a", Payload: fmt.Appendf(nil, "v%d", n)}); err != nil {
			t.Fatalf("edit to version %d: %v", n, err)
		}
		if _, err := refuse(t, s, full.ID); err != nil {
			t.Fatal(err)
		}
	}
	record("TASKS.r3", func(e *Entry) {
		e.Payload, e.PayloadMissing, e.PayloadSize, e.PayloadSHA256 = nil, true, 10, PayloadSum([]byte("0123456789"))
	})
	record("TASKS.r4", func(e *Entry) {
		for i := range 700 {
			e.Headers[fmt.Sprintf("X-H-%d", i)] = []string{event.EncodeHeader(strings.Repeat("\xff", 1000))}
		}
	})
	tests := []struct {
		name string
		id   string
		ed   Edit
		want error
	}{
		{"made on version 1, the entry replays version 2", "TASKS.r1", Edit{Base: 1, Payload: []byte("x")}, ErrWrongStatus},
		{"past the bound", full.ID, Edit{Payload: []byte("one more")}, ErrTooLarge},
		{"headers on a missing payload", "TASKS.r3", Edit{Headers: map[string]string{"X-A": "1"}}, ErrInvalid},
		{"headers past the document's limit", "TASKS.r4", Edit{Headers: map[string]string{"X-Big": strings.Repeat("v", 90_000)}}, ErrTooLarge},
	}
	for _, tt := range tests {
		before, err := s.GetMeta(ctx, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		tt.ed.By = "b"
		if _, err := approveEdit(t, s, tt.id, Escalated, &tt.ed); !errors.Is(err, tt.want) {
			t.Errorf("%s: TransitionScoped() = %v, want %v", tt.name, err, tt.want)
		}
		after, err := s.GetMeta(ctx, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		if after.Status != Escalated || len(after.History) != len(before.History) || !cmp.Equal(after.Versions(), before.Versions()) {
			t.Errorf("%s: the entry changed: %s, %d versions", tt.name, after.Status, len(after.Versions()))
		}
	}
	// The heavy entry still takes a payload edit: the bytes go to chunks.
	edit := bytes.Repeat([]byte("e"), 200<<10)
	if _, err := approveEdit(t, s, "TASKS.r4", Escalated, &Edit{By: "b", Payload: edit, Headers: map[string]string{"X-Reviewed": "yes"}}); err != nil {
		t.Fatalf("payload edit of an entry with heavy headers = %v", err)
	}
	got, payloads := versionBytes(t, s, "TASKS.r4")
	if string(payloads[0]) != "orig" || !bytes.Equal(payloads[1], edit) || len(got.Headers) != 701 {
		t.Errorf("heavy entry after the edit: versions of %d and %d bytes, %d headers; want the original, the edit and all 701 headers", len(payloads[0]), len(payloads[1]), len(got.Headers))
	}
}

// Two approvals of the same decision at once make one version: the edit
// is made inside the transaction that moves the entry out of the status
// both read, so the second finds it moved (ErrWrongStatus) and adds
// nothing; a transaction Firestore retries on contention starts again
// from the entry as stored, so a retried body never appends twice; and
// the chunks both wrote before are the same documents (content-named).
func TestConcurrentEditsMakeOneVersion(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	e := entry("TASKS.c1", []byte("orig"))
	e.Status = Escalated
	if _, err := s.Record(ctx, e, "classify"); err != nil {
		t.Fatal(err)
	}
	edit := bytes.Repeat([]byte("z"), InlinePayload+1)
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = approveEdit(t, s, e.ID, Escalated, &Edit{By: "op", Payload: edit}) })
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrWrongStatus) && !errors.Is(err, ErrConflict):
			t.Errorf("approval %d = %v, want nil, ErrWrongStatus or ErrConflict", i, err)
		}
	}
	got, payloads := versionBytes(t, s, e.ID)
	if won != 1 || len(payloads) != 2 || !bytes.Equal(payloads[1], edit) || string(payloads[0]) != "orig" {
		t.Errorf("%d approvals won, %d versions; want 1 approval and 2 versions (the original and the edit)", won, len(payloads))
	}
	if v, _ := got.ReplayVersion(); v.N != 2 {
		t.Errorf("replay version = %d, want 2", v.N)
	}
}

// An entry without versions (every entry recorded before versions existed)
// reads as version 1, the original, whatever its payload's storage; its
// replay publishes it.
func TestEntriesWithoutVersionsReadAsTheOriginal(t *testing.T) {
	s, _ := newStore(t)
	ctx := testenv.Context(t)
	big := bytes.Repeat([]byte("b"), ChunkSize+1)
	tests := []struct {
		name    string
		payload []byte
		missing bool
	}{
		{"inline", []byte(`{"a":1}`), false},
		{"chunked", big, false},
		{"empty", []byte{}, false},
		{"missing", nil, true},
	}
	for i, tt := range tests {
		e := entry(fmt.Sprintf("TASKS.o%d", i), tt.payload)
		if tt.missing {
			e.PayloadMissing, e.PayloadSize, e.PayloadSHA256 = true, 3, PayloadSum([]byte("abc"))
		}
		if _, err := s.Record(ctx, e, "classify"); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetMeta(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := PayloadVersion{N: 1, At: got.CreatedAt, Size: int64(len(tt.payload)), SHA256: PayloadSum(tt.payload), Chunks: got.PayloadChunkCount, Missing: tt.missing}
		if tt.missing {
			want.Size, want.SHA256 = 3, PayloadSum([]byte("abc"))
		}
		v, err := got.ReplayVersion()
		if err != nil || !cmp.Equal(want, v) || len(got.Versions()) != 1 {
			t.Errorf("%s: ReplayVersion() = %+v, %v (of %d); want %+v alone", tt.name, v, err, len(got.Versions()), want)
		}
		b, err := s.VersionPayload(ctx, got, 1)
		if err != nil || !bytes.Equal(b, tt.payload) || (b == nil) != tt.missing {
			t.Errorf("%s: VersionPayload(1) = %d bytes (nil %t), %v; want the original", tt.name, len(b), b == nil, err)
		}
	}
}

// refuse is the replay's claim of a scheduled entry and its refusal to
// publish it (escalated), as the status table allows them.
func refuse(t *testing.T, s *Store, id string) (*Entry, error) {
	t.Helper()
	claim(t, s, id)
	return s.Transition(testenv.Context(t), id, Change{From: MoveGate.From, To: Escalated, By: "replay"})
}
