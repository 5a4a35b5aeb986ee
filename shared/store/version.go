package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
)

// This file holds an entry's payload versions (docs/storage.md, "Payload
// versions"). The payload captured with the dead task is version 1 and is
// never rewritten; each approved edit is a new version based on the one
// the entry replayed until then. A version's bytes are chunk documents, as
// a large original's are (payload.go), so no edit grows the entry's own
// document by its payload; the entry keeps the versions' descriptions and
// the number of the one its next replay publishes.

// MaxPayloadVersions bounds the versions of one entry, the original
// included: each is described in the entry's document.
const MaxPayloadVersions = 20

// maxVersionChunks bounds the chunk documents of an entry's versions
// together: a change of the entry's retention updates each of them in one
// transaction, which holds at most 500 writes.
const maxVersionChunks = 400

// maxEditedEntry bounds an entry's document after an edit, as
// entryDocSize estimates it: below Firestore's 1 MiB with room for the
// estimate's error (it counts times and names as JSON, longer than stored).
const maxEditedEntry = 1_000_000

// PayloadVersion is one version of an entry's payload.
type PayloadVersion struct {
	// N numbers the versions from 1, the original.
	N int `firestore:"n" json:"n"`
	// Base is the version this one edits (0 for the original).
	Base int `firestore:"base,omitempty" json:"base,omitempty"`
	// By is who approved the edit (empty for the original), and Role the
	// role they approved it in.
	By   string         `firestore:"by,omitempty" json:"by,omitempty"`
	Role authority.Role `firestore:"role,omitempty" json:"role,omitempty"`
	At   time.Time      `firestore:"at" json:"at"`
	// Size and SHA256 describe the version's bytes.
	Size   int64  `firestore:"size" json:"size"`
	SHA256 string `firestore:"sha256" json:"sha256"`
	// Chunks is the number of chunk documents holding the bytes (named by
	// SHA256 as an original's are). 0 with a Size: the bytes are the
	// original's, stored inline (a version that only sets headers on it).
	Chunks int `firestore:"chunks,omitempty" json:"chunks,omitempty"`
	// Headers are the header values this version sets on the replay, on top
	// of those its bases set, encoded as the entry's headers are
	// (event.EncodeHeader).
	Headers map[string]string `firestore:"headers,omitempty" json:"headers,omitempty"`
	// Confirmed are the risks of the edit its approver confirmed
	// explicitly (shared/operator: an empty payload, invalid JSON).
	Confirmed []string `firestore:"confirmed,omitempty" json:"confirmed,omitempty"`
	// Missing: the original was not captured (version 1 only; the entry's
	// payload_missing).
	Missing bool `firestore:"-" json:"missing,omitempty"`
}

// Original reports whether v is the payload captured with the dead task.
func (v PayloadVersion) Original() bool { return v.N == 1 }

// HeaderNames are the names of the headers v sets, decoded and sorted.
func (v PayloadVersion) HeaderNames() []string {
	out := make([]string, 0, len(v.Headers))
	for k := range v.Headers {
		out = append(out, decodedHeader(k))
	}
	slices.Sort(out)
	return out
}

// Versions are the entry's payload versions, oldest first: the original
// (version 1, for every entry, those recorded before versions existed
// included) and each approved edit.
func (e *Entry) Versions() []PayloadVersion {
	v1 := PayloadVersion{N: 1, At: e.CreatedAt, Size: e.PayloadSize, SHA256: e.PayloadSHA256, Chunks: e.PayloadChunkCount, Missing: e.PayloadMissing}
	return append([]PayloadVersion{v1}, e.PayloadVersions...)
}

// Version is version n of the entry's payload.
func (e *Entry) Version(n int) (PayloadVersion, bool) {
	vs := e.Versions()
	if n < 1 || n > len(vs) || vs[n-1].N != n {
		return PayloadVersion{}, false
	}
	return vs[n-1], true
}

// ReplayVersion is the version the entry's next replay publishes: the
// original until an approval edits it. ErrCorrupt when the entry names a
// version it does not have (a hand-edited document).
func (e *Entry) ReplayVersion() (PayloadVersion, error) {
	n := max(1, e.PayloadVersion)
	v, ok := e.Version(n)
	if !ok {
		return v, fmt.Errorf("%w: entry %s replays payload version %d of %d", ErrCorrupt, e.ID, n, len(e.Versions()))
	}
	return v, nil
}

// HeadersOf are the headers a replay of version v carries, encoded as
// Headers: the entry's own with the values v and its bases set (a set name
// replaces every value of the name, whatever its case). The entry's own
// headers are left as they are.
func (e *Entry) HeadersOf(v PayloadVersion) map[string][]string {
	var chain []PayloadVersion
	for cur, ok := v, true; ok && cur.N > 1 && len(chain) < MaxPayloadVersions; cur, ok = e.Version(cur.Base) {
		chain = append(chain, cur)
		if cur.Base >= cur.N {
			break // a hand-edited loop; the bases are always older
		}
	}
	h := maps.Clone(e.Headers)
	for _, ver := range slices.Backward(chain) {
		for name, value := range ver.Headers {
			if h == nil {
				h = map[string][]string{}
			}
			plain := decodedHeader(name)
			for k := range h {
				if strings.EqualFold(decodedHeader(k), plain) {
					delete(h, k)
				}
			}
			h[name] = []string{value}
		}
	}
	return h
}

func decodedHeader(s string) string {
	d, err := event.DecodeHeader(s)
	if err != nil {
		return s
	}
	return d
}

// VersionPayload reads the bytes of version n of e's payload (e read
// whole: Get, GetMeta or a transition's result) and verifies them against
// the version's sha256 (ErrCorrupt). A missing original is nil, an empty
// version empty and not nil. No version n is ErrNotFound.
func (s *Store) VersionPayload(ctx context.Context, e *Entry, n int) ([]byte, error) {
	v, ok := e.Version(n)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: entry %s has no payload version %d (it has %d)", ErrNotFound, e.ID, n, len(e.Versions()))
	case v.Missing:
		return nil, nil
	case v.Chunks == 0 && v.Size > 0:
		// The original's inline bytes (version 1, or a version that only
		// set headers on it).
		if PayloadSum(e.Payload) != v.SHA256 {
			return nil, fmt.Errorf("%w: entry %s: payload version %d: %d bytes, sha256 %s, recorded %s", ErrCorrupt, e.ID, n, len(e.Payload), PayloadSum(e.Payload), v.SHA256)
		}
		return e.Payload, nil
	}
	if v.Original() && int64(len(e.Payload)) == v.Size && PayloadSum(e.Payload) == v.SHA256 {
		// Inline, or its chunks already read (Get); an empty payload is
		// stored as no bytes, and read as present and empty.
		if e.Payload == nil {
			return []byte{}, nil
		}
		return e.Payload, nil
	}
	c := Entry{ID: e.ID, PayloadChunkCount: v.Chunks, PayloadSHA256: v.SHA256, PayloadSize: v.Size}
	if err := s.loadPayload(ctx, &c); err != nil {
		return nil, fmt.Errorf("payload version %d: %w", n, err)
	}
	if c.Payload == nil {
		c.Payload = []byte{}
	}
	return c.Payload, nil
}

// Edit is what an approval does to an entry's payload, in the transition
// that approves it (TransitionScoped). With a Payload or Headers it makes a
// new version based on the one the entry replays, which the next replay
// publishes; with neither it makes none, and the history names the version
// the approval replays.
type Edit struct {
	// Payload replaces the base's bytes (nil keeps them; empty is an empty
	// payload).
	Payload []byte
	// Headers are header values to set on the replay, as sent.
	Headers map[string]string
	// By approves the edit, in the role Role.
	By   string
	Role authority.Role
	// Base, when set, is the version the edit was made on: the edit is
	// refused (ErrWrongStatus) when the entry replays another by now.
	Base int
	// Confirmed are the risks of the edit its approver confirmed.
	Confirmed []string
}

func (ed *Edit) changes() bool { return ed.Payload != nil || len(ed.Headers) > 0 }

// stagedEdit is an edit with its payload's chunks written, before the
// transaction that binds them to the entry.
type stagedEdit struct {
	*Edit
	bytes *Entry // the new payload's size, sha256 and chunks; nil: the base's
}

// stageEdit writes the chunks of an edit's new payload (every non-empty
// one: a version's bytes never go into the entry's document), under
// content-derived ids with the default retention, so a retried or
// abandoned edit leaves only identical documents or orphans that expire.
func (s *Store) stageEdit(ctx context.Context, id string, ed *Edit) (*stagedEdit, error) {
	if ed == nil {
		return nil, nil
	}
	st := &stagedEdit{Edit: ed}
	if ed.Payload == nil {
		return st, nil
	}
	if len(ed.Payload) > MaxPayload {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(ed.Payload), MaxPayload)
	}
	st.bytes = &Entry{Payload: ed.Payload, PayloadSHA256: PayloadSum(ed.Payload), PayloadSize: int64(len(ed.Payload)), ExpireAt: s.Now().Add(Retention)}
	if len(ed.Payload) > 0 {
		if err := s.writeChunks(ctx, id, st.bytes); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// applyEdit makes the version of st on e, read in the transition's
// transaction at now, and returns what the history note adds: the version
// approved, and what the edit changed.
func applyEdit(e *Entry, st *stagedEdit, now time.Time) (string, error) {
	base, err := e.ReplayVersion()
	if err != nil {
		return "", err
	}
	if st.Base != 0 && st.Base != base.N {
		return "", fmt.Errorf("%w: entry %s replays payload version %d now, not version %d the edit was made on", ErrWrongStatus, e.ID, base.N, st.Base)
	}
	if !st.changes() {
		return "; payload " + describeVersion(base), nil
	}
	if st.bytes == nil && base.Missing {
		return "", fmt.Errorf("%w: entry %s: payload version %d is missing; an edit of its headers needs a payload too", ErrInvalid, e.ID, base.N)
	}
	vs := e.Versions()
	if len(vs) >= MaxPayloadVersions {
		return "", fmt.Errorf("%w: entry %s has %d payload versions, at most %d", ErrTooLarge, e.ID, len(vs), MaxPayloadVersions)
	}
	v := PayloadVersion{N: len(vs) + 1, Base: base.N, By: st.By, Role: st.Role, At: now, Size: base.Size, SHA256: base.SHA256, Chunks: base.Chunks,
		Confirmed: slices.Clone(st.Confirmed)}
	if b := st.bytes; b != nil {
		v.Size, v.SHA256, v.Chunks = b.PayloadSize, b.PayloadSHA256, b.PayloadChunkCount
	}
	if len(st.Headers) > 0 {
		v.Headers = make(map[string]string, len(st.Headers))
		for name, value := range st.Headers {
			v.Headers[event.EncodeHeader(name)] = event.EncodeHeader(value)
		}
	}
	if n := len(chunkSets(append(vs, v))); n > maxVersionChunks {
		return "", fmt.Errorf("%w: entry %s: its payload versions would take %d chunk documents, at most %d", ErrTooLarge, e.ID, n, maxVersionChunks)
	}
	e.PayloadVersions = append(slices.Clone(e.PayloadVersions), v)
	e.PayloadVersion = v.N
	note := fmt.Sprintf("; payload v%d by %s from v%d", v.N, v.Author(), base.N)
	if st.bytes != nil {
		note += fmt.Sprintf(": payload edited, %s -> %s", bytesOf(base), bytesOf(v))
	}
	if len(v.Headers) > 0 {
		note += "; headers set: " + strings.Join(v.HeaderNames(), ", ")
	}
	if len(v.Confirmed) > 0 {
		note += "; confirmed: " + strings.Join(v.Confirmed, ", ")
	}
	return note, nil
}

// Author is who approved the version, in which role.
func (v PayloadVersion) Author() authority.Actor { return authority.Actor{Name: v.By, Role: v.Role} }

// describeVersion names v in a history note.
func describeVersion(v PayloadVersion) string {
	if v.Original() {
		return "v1 (the original, " + bytesOf(v) + ")"
	}
	return fmt.Sprintf("v%d (by %s, %s)", v.N, v.Author(), bytesOf(v))
}

func bytesOf(v PayloadVersion) string {
	if v.Missing {
		return "missing"
	}
	return fmt.Sprintf("%d B sha256 %s", v.Size, v.SHA256)
}

// chunkRef names chunk n of the bytes whose sha256 is sum.
type chunkRef struct {
	sum string
	n   int
}

// chunkSets are the chunk documents of versions, each once (versions with
// the same bytes share them).
func chunkSets(versions []PayloadVersion) []chunkRef {
	var out []chunkRef
	seen := map[string]bool{}
	for _, v := range versions {
		if v.Chunks == 0 || seen[v.SHA256] {
			continue
		}
		seen[v.SHA256] = true
		for n := range v.Chunks {
			out = append(out, chunkRef{v.SHA256, n})
		}
	}
	return out
}

// entryDocSize estimates the size of e's document: its JSON (longer than
// Firestore's encoding for times and numbers), its inline payload and its
// payload versions, which its JSON leaves out.
func entryDocSize(e *Entry) (int, error) {
	doc, err := json.Marshal(e)
	if err != nil {
		return 0, fmt.Errorf("estimate the size of entry %s: %w", e.ID, err)
	}
	versions, err := json.Marshal(e.PayloadVersions)
	if err != nil {
		return 0, fmt.Errorf("estimate the size of entry %s: %w", e.ID, err)
	}
	return len(doc) + len(e.Payload) + len(versions), nil
}

// expireChunkRefs gives the chunk documents refs the entry's expire_at, in
// the transaction that sets it or binds them.
func (s *Store) expireChunkRefs(tx *firestore.Transaction, e *Entry, refs []chunkRef) error {
	for _, c := range refs {
		ref := s.entryRef(e.ID).Collection(PayloadChunks).Doc(chunkID(c.sum, c.n))
		if err := tx.Update(ref, []firestore.Update{{Path: "expire_at", Value: e.ExpireAt}}); err != nil {
			return fmt.Errorf("firestore update expire_at of %s chunk %s-%d: %w", e.ID, c.sum, c.n, err)
		}
	}
	s.wrote(len(refs))
	return nil
}
