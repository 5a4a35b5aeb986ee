package console

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strconv"

	"github.com/jsdlq/jsdlq/shared/store"
)

// This file shows an entry's payload versions (docs/console.md, "Payload
// versions"): the entry page lists them with author and diff, shows any of
// them read-only (?version=N), and each, the original included, downloads
// as it is stored (/entries/{id}/payload?version=N).

// versionLine is one payload version as the entry page lists it.
type versionLine struct {
	V store.PayloadVersion
	// Headers are the header values the version sets, decoded.
	Headers []headerLine
	// Diff is the version against its base, unchanged runs folded: for
	// text and JSON within one chunk of the page. Summary says what
	// changed otherwise (binary, larger, the same bytes, missing).
	Diff    []diffLine
	Summary string
	// Replays: the next replay publishes it. Shown: the page shows it.
	Replays, Shown bool
}

// versionParam reads ?version=N (0 when absent) of the entry page, the
// download and the tenant API; the caller words the refusal (uiBad,
// badRequest).
func versionParam(r *http.Request) (int, error) {
	vs, ok := r.URL.Query()["version"]
	if !ok {
		return 0, nil
	}
	if len(vs) != 1 {
		return 0, errors.New("version: one value")
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < 1 {
		return 0, fmt.Errorf("version %q is not a payload version (1, 2, …)", vs[0])
	}
	return n, nil
}

// entryVersions lists e's payload versions, each against its base, and
// returns the bytes of version shown (the one the next replay publishes
// when shown is 0) and its number. A version e does not have is a 404.
func (s *Server) entryVersions(ctx context.Context, e *store.Entry, shown int) ([]versionLine, []byte, int, error) {
	next, err := e.ReplayVersion()
	if err != nil {
		return nil, nil, 0, err
	}
	if shown == 0 {
		shown = next.N
	}
	if _, ok := e.Version(shown); !ok {
		return nil, nil, 0, &uiError{http.StatusNotFound, fmt.Sprintf("entry %s has no payload version %d (it has %d)", e.ID, shown, len(e.Versions()))}
	}
	payloads := map[int][]byte{}
	load := func(v store.PayloadVersion) ([]byte, error) {
		if b, ok := payloads[v.N]; ok {
			return b, nil
		}
		b, err := s.store.VersionPayload(ctx, e, v.N)
		payloads[v.N] = b
		return b, err
	}
	var lines []versionLine
	for _, v := range e.Versions() {
		l := versionLine{V: v, Replays: v.N == next.N, Shown: v.N == shown}
		for name, value := range v.Headers {
			l.Headers = append(l.Headers, headerLine{decodeHeader(name), decodeHeader(value)})
		}
		sortHeaders(l.Headers)
		base, hasBase := e.Version(v.Base)
		switch {
		case v.Original() && v.Missing:
			l.Summary = fmt.Sprintf("not captured (the bridge knew %d B, sha256 %s)", v.Size, v.SHA256)
		case v.Original():
			l.Summary = "as captured with the dead task"
		case !hasBase:
			l.Summary = fmt.Sprintf("%d B, sha256 %s", v.Size, v.SHA256)
		case base.SHA256 == v.SHA256 && !base.Missing:
			l.Summary = "payload unchanged"
		case base.Missing || base.Size > payloadChunk || v.Size > payloadChunk:
			l.Summary = fmt.Sprintf("%s → %d B, sha256 %s", sizeOf(base), v.Size, v.SHA256)
		default:
			was, err := load(base)
			if err != nil {
				return nil, nil, 0, err
			}
			now, err := load(v)
			if err != nil {
				return nil, nil, 0, err
			}
			wv, _ := viewPayload(was, 1)
			nv, _ := viewPayload(now, 1)
			if wv.Kind == "binary" || nv.Kind == "binary" {
				l.Summary = fmt.Sprintf("binary: %s → %d B, sha256 %s", sizeOf(base), v.Size, v.SHA256)
			} else {
				l.Diff = foldDiff(lineDiff(wv.Text, nv.Text), 3)
			}
		}
		lines = append(lines, l)
	}
	v, _ := e.Version(shown)
	b, err := load(v)
	if err != nil {
		return nil, nil, 0, err
	}
	return lines, b, shown, nil
}

// sortHeaders orders header lines by name.
func sortHeaders(h []headerLine) {
	sort.Slice(h, func(i, j int) bool { return h[i].Name < h[j].Name })
}

func sizeOf(v store.PayloadVersion) string {
	if v.Missing {
		return "missing"
	}
	return fmt.Sprintf("%d B, sha256 %s", v.Size, v.SHA256)
}

// payloadDownload answers GET /entries/{entry}/payload?version=N (the one
// the next replay publishes when absent): the version's bytes as stored,
// as an attachment.
func (s *Server) payloadDownload(w http.ResponseWriter, r *http.Request) {
	who, ok := s.operator(w, r)
	if !ok {
		return
	}
	fail := func(err error) { s.uiFail(w, r, who, s.csrfToken(w, r), err) }
	id, err := pathEntry(r.PathValue("entry"))
	if err != nil {
		fail(err)
		return
	}
	n, err := versionParam(r)
	if err != nil {
		fail(uiBad("%v", err))
		return
	}
	e, err := s.store.GetMeta(r.Context(), id)
	if err != nil {
		fail(err)
		return
	}
	if n == 0 {
		v, err := e.ReplayVersion()
		if err != nil {
			fail(err)
			return
		}
		n = v.N
	}
	v, ok := e.Version(n)
	switch {
	case !ok:
		fail(&uiError{http.StatusNotFound, fmt.Sprintf("entry %s has no payload version %d", id, n)})
		return
	case v.Missing:
		fail(&uiError{http.StatusNotFound, fmt.Sprintf("version %d of entry %s was not captured", n, id)})
		return
	}
	b, err := s.store.VersionPayload(r.Context(), e, n)
	if err != nil {
		fail(err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": fmt.Sprintf("%s-v%d.bin", id, n)}))
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Payload-SHA256", v.SHA256)
	w.Write(b)
}
