package console_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/html"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/storetest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// elementText is the text of the element of page whose id is id ("" and
// false when there is none), as a browser shows it.
func elementText(t *testing.T, page, id string) (string, bool) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var found *html.Node
	var find func(n *html.Node)
	find = func(n *html.Node) {
		for _, a := range n.Attr {
			if a.Key == "id" && a.Val == id {
				found = n
			}
		}
		for c := n.FirstChild; c != nil && found == nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	if found == nil {
		return "", false
	}
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(found)
	return b.String(), true
}

// download gets a payload version through the page's download link.
func (b *browser) download(path string) (int, http.Header, []byte) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// lastMessage is the newest message on the work stream.
func (e *env) lastMessage(t *testing.T) (string, map[string][]string) {
	t.Helper()
	ctx := testenv.Context(t)
	s, err := e.js.Stream(ctx, jevent.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, e.published(t))
	if err != nil {
		t.Fatal(err)
	}
	return string(m.Data), m.Header
}

// approveThroughPages edits the approve form of id's page (payload set
// when payload is not nil, headers as typed), previews and confirms it
// through the pages' own forms, and returns the confirmation's status.
func approveThroughPages(t *testing.T, b *browser, id string, payload *string, headers string) int {
	t.Helper()
	action := "/entries/" + id + "/approve"
	_, page := b.get("/entries/" + id)
	form := formFields(t, page, action, [2]string{"step", "preview"})
	if payload != nil {
		form.Set("payload", *payload)
	}
	form.Set("headers", headers)
	code, _, preview := b.post(action, form)
	if code != http.StatusOK {
		t.Fatalf("preview = %d:\n%s", code, preview)
	}
	code, _, _ = b.post(action, formFields(t, preview, action, [2]string{"step", "confirm"}))
	return code
}

// After an edited approval through the console's pages the replay on the
// work stream carries the edit; the original and the edit are both
// readable on the entry page (listed with author and diff, shown with
// ?version=N, downloaded as stored) with the original's bytes and sha256
// unchanged. A second edit, on a page that replays version 2, is version 3
// based on 2.
func TestApproveWithAnEditKeepsTheOriginal(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	original := "{\"prompt\":\"write\",\"max_tokens\":120000}"
	e.seed(t, "acme", "TASKS.100", store.Escalated, original)
	b := newBrowser(t, e.srv.URL)

	_, page := b.get("/entries/TASKS.100")
	form := formFields(t, page, "/entries/TASKS.100/approve", [2]string{"step", "preview"})
	edited := "{\"prompt\":\"write\",\"max_tokens\":4000}"
	form.Set("payload", edited)
	form.Set("headers", "X-Context-Budget: 4000")
	code, _, preview := b.post("/entries/TASKS.100/approve", form)
	note, _ := elementText(t, preview, "version-note")
	if code != http.StatusOK || !strings.Contains(note, "makes version 2, an edit of version 1 (the original)") {
		t.Fatalf("preview = %d, version note %q, want one making version 2 of the original", code, note)
	}
	before := e.published(t)
	if code, _, body := b.post("/entries/TASKS.100/approve", formFields(t, preview, "/entries/TASKS.100/approve", [2]string{"step", "confirm"})); code != http.StatusSeeOther {
		t.Fatalf("confirm = %d:\n%s", code, body)
	}
	e.waitPublished(t, before+1)
	data, header := e.lastMessage(t)
	if data != edited || !slices.Equal(header["X-Context-Budget"], []string{"4000"}) {
		t.Errorf("replay = %q with X-Context-Budget %v, want the edit with 4000", data, header["X-Context-Budget"])
	}
	en, err := e.st.Get(ctx, "TASKS.100")
	if err != nil {
		t.Fatal(err)
	}
	if string(en.Payload) != original || en.PayloadSHA256 != store.PayloadSum([]byte(original)) || len(en.Versions()) != 2 {
		t.Errorf("after the approval: original %q sha256 %s, %d versions; want the original unchanged and 2 versions", en.Payload, en.PayloadSHA256, len(en.Versions()))
	}

	// The entry page: the versions with author and diff; each viewable.
	_, page = b.get("/entries/TASKS.100")
	v2, _ := elementText(t, page, "version-2")
	for _, want := range []string{"edit of version 1 by ops@example.com", "the next replay publishes it", `-   "max_tokens": 120000`, `+   "max_tokens": 4000`, "X-Context-Budget: 4000"} {
		if !strings.Contains(v2, want) {
			t.Errorf("version 2 on the entry page lacks %q:\n%s", want, v2)
		}
	}
	for n, want := range map[string]string{"1": `"max_tokens": 120000`, "2": `"max_tokens": 4000`} {
		_, page := b.get("/entries/TASKS.100?version=" + n)
		facts, _ := elementText(t, page, "payload-facts")
		shown, _ := elementText(t, page, "payload")
		if !strings.HasPrefix(facts, "Version "+n) || !strings.Contains(shown, want) {
			t.Errorf("?version=%s shows %q: %q, want version %s with %s", n, facts, shown, n, want)
		}
	}
	for path, want := range map[string]string{"/entries/TASKS.100/payload?version=1": original, "/entries/TASKS.100/payload?version=2": edited, "/entries/TASKS.100/payload": edited} {
		code, h, body := b.download(path)
		if code != http.StatusOK || string(body) != want || !strings.HasPrefix(h.Get("Content-Disposition"), "attachment") || h.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("GET %s = %d %q (%s, %s), want the attachment %q", path, code, body, h.Get("Content-Type"), h.Get("Content-Disposition"), want)
		}
	}
	b.wantCodes(map[string]int{
		"/entries/TASKS.100?version=3": http.StatusNotFound, "/entries/TASKS.100?version=0": http.StatusBadRequest,
		"/entries/TASKS.100?version=x": http.StatusBadRequest, "/entries/TASKS.100?version=1&version=2": http.StatusBadRequest,
		"/entries/TASKS.100/payload?version=3": http.StatusNotFound, "/entries/TASKS.100/payload?version=-1": http.StatusBadRequest,
	})

	// A second edit: an entry whose approved version 2 was refused by its
	// replay (as replay's moves, no task), edited again on its page.
	e.seed(t, "acme", "TASKS.101", store.Escalated, `{"n":1}`)
	if _, err := e.st.TransitionScoped(ctx, "TASKS.101", store.AllTenants, store.Change{From: []store.Status{store.Escalated}, To: store.Scheduled, By: "bob", Note: store.ApprovalNote + " by bob"},
		&store.Edit{By: "bob", Payload: []byte(`{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Refuse(ctx, e.st, "TASKS.101", store.Escalated, "replay", "payload_too_large"); err != nil {
		t.Fatal(err)
	}
	third := `{"n":3}`
	before = e.published(t)
	if code := approveThroughPages(t, b, "TASKS.101", &third, ""); code != http.StatusSeeOther {
		t.Fatalf("second edit's confirmation = %d", code)
	}
	e.waitPublished(t, before+1)
	if data, _ := e.lastMessage(t); data != third {
		t.Errorf("replay of the second edit = %q, want %q", data, third)
	}
	en, err = e.st.Get(ctx, "TASKS.101")
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]int
	for _, v := range en.Versions() {
		got = append(got, [2]int{v.N, v.Base})
	}
	if diff := cmp.Diff([][2]int{{1, 0}, {2, 1}, {3, 2}}, got); diff != "" {
		t.Errorf("versions and their bases (-want +got):\n%s", diff)
	}
}

// An edit that empties the payload or breaks its JSON is previewed with a
// warning and a box to tick; confirmed without it, the preview comes back
// with the refusal and the edit, and nothing changes; with it ticked, the
// approval is recorded with the risk confirmed. A text payload edited into
// other text has no warning.
func TestRiskyEditNeedsTheBox(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	tests := []struct {
		name, original, edit string
		risk                 string // "" none
		warning              string
	}{
		{"cleared", `{"a":1}`, "", "empty", "empty"},
		{"JSON broken", `{"a":1}`, `{"a":`, "invalid_json", "not: unexpected end of JSON input"},
		{"text to text", "plain words", "other { words", "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("TASKS.11%d", i)
			action := "/entries/" + id + "/approve"
			e.seed(t, "acme", id, store.Quarantined, tt.original)
			b := newBrowser(t, e.srv.URL)
			_, page := b.get("/entries/" + id)
			form := formFields(t, page, action, [2]string{"step", "preview"})
			form.Set("payload", tt.edit)
			code, _, preview := b.post(action, form)
			risks, warned := elementText(t, preview, "risks")
			if code != http.StatusOK || warned != (tt.risk != "") || !strings.Contains(risks, tt.warning) {
				t.Fatalf("preview = %d, warning %q (shown %t), want %q:\n%s", code, risks, warned, tt.warning, preview)
			}
			confirm := formFields(t, preview, action, [2]string{"step", "confirm"})
			if tt.risk != "" {
				if confirm.Has("confirm") {
					t.Fatalf("the risk's box is ticked before the operator ticks it: %v", confirm)
				}
				snap := e.snapshot(t)
				code, _, again := b.post(action, confirm)
				refusal, _ := elementText(t, again, "approve-error")
				if code != http.StatusBadRequest || !strings.Contains(refusal, tt.warning) {
					t.Errorf("confirm without the box = %d, refusal %q, want 400 naming the risk", code, refusal)
				}
				if diff := diffSnap(snap, e.snapshot(t)); diff != "" {
					t.Errorf("the refused confirmation changed state: %s", diff)
				}
				confirm = formFields(t, again, action, [2]string{"step", "confirm"})
				if confirm.Get("payload") != tt.edit {
					t.Errorf("the preview shown again carries payload %q, want the edit %q", confirm.Get("payload"), tt.edit)
				}
				confirm.Set("confirm", tt.risk) // the operator ticks the box
			}
			before := e.published(t)
			if code, _, body := b.post(action, confirm); code != http.StatusSeeOther {
				t.Fatalf("confirm = %d:\n%s", code, body)
			}
			e.waitPublished(t, before+1)
			if data, _ := e.lastMessage(t); data != tt.edit {
				t.Errorf("replay = %q, want the edit %q", data, tt.edit)
			}
			en, err := e.st.GetMeta(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			v, _ := en.Version(2)
			if want := []string{tt.risk}; tt.risk != "" && !slices.Equal(v.Confirmed, want) || tt.risk == "" && v.Confirmed != nil {
				t.Errorf("version 2 records confirmed %v, want %q", v.Confirmed, tt.risk)
			}
		})
	}
}

// Reserved or malformed header edits are refused at the preview: the form
// comes back with the refusal beside it and the operator's edit intact,
// payload and headers; corrected in that form, the approval goes through.
func TestReservedHeadersRefusedAtPreview(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	e.seed(t, "acme", "TASKS.120", store.AwaitingApproval, `{"a":1}`)
	action := "/entries/TASKS.120/approve"
	b := newBrowser(t, e.srv.URL)
	edited := "{\"a\":2,\n \"b\":\"two lines\"}"
	tests := []struct {
		headers, refusal string
	}{
		{"X-Keep: 1\nNats-Msg-Id: forged", `header "Nats-Msg-Id" is set by JetStream or jsdlq`},
		{"X-Tenant-ID: globex", "names the task's tenant or identity"},
		{"x-idempotency-key: fresh", "names the task's tenant or identity"},
		{"Jsdlq-Strategy: none", "set by JetStream or jsdlq"},
		{"X Spaced: 1", "header name"},
		{"no colon here", "is not Name: value"},
	}
	for _, tt := range tests {
		snap := e.snapshot(t)
		_, page := b.get("/entries/TASKS.120")
		form := formFields(t, page, action, [2]string{"step", "preview"})
		form.Set("payload", edited)
		form.Set("headers", tt.headers)
		code, _, again := b.post(action, form)
		refusal, _ := elementText(t, again, "approve-error")
		if code != http.StatusBadRequest || !strings.Contains(refusal, tt.refusal) {
			t.Errorf("preview with %q = %d, refusal %q, want 400 saying %q", tt.headers, code, refusal, tt.refusal)
			continue
		}
		kept := formFields(t, again, action, [2]string{"step", "preview"})
		if kept.Get("payload") != edited || kept.Get("headers") != tt.headers || kept.Get("base") != "1" {
			t.Errorf("the form shown again holds payload %q, headers %q, base %q; want the edit %q, %q on version 1", kept.Get("payload"), kept.Get("headers"), kept.Get("base"), edited, tt.headers)
		}
		if diff := diffSnap(snap, e.snapshot(t)); diff != "" {
			t.Errorf("the refused preview changed state: %s", diff)
		}
	}
	// Corrected in the form shown again, it goes through.
	form := formFields(t, page(t, b, "/entries/TASKS.120"), action, [2]string{"step", "preview"})
	form.Set("payload", edited)
	form.Set("headers", "Nats-Msg-Id: forged")
	_, _, again := b.post(action, form)
	fixed := formFields(t, again, action, [2]string{"step", "preview"})
	fixed.Set("headers", "X-Keep: 1")
	code, _, preview := b.post(action, fixed)
	if code != http.StatusOK {
		t.Fatalf("preview of the corrected form = %d:\n%s", code, preview)
	}
	if code, _, body := b.post(action, formFields(t, preview, action, [2]string{"step", "confirm"})); code != http.StatusSeeOther {
		t.Fatalf("confirm = %d:\n%s", code, body)
	}
	en, err := e.st.Get(ctx, "TASKS.120")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := en.ReplayVersion()
	got, err := e.st.VersionPayload(ctx, en, v.N)
	if err != nil || string(got) != edited || !slices.Equal(v.HeaderNames(), []string{"X-Keep"}) || string(en.Payload) != `{"a":1}` {
		t.Errorf("approved version %d = %q (%v) setting %v, original %q; want the edit setting X-Keep, the original kept", v.N, got, err, v.HeaderNames(), en.Payload)
	}
}

func page(t *testing.T, b *browser, path string) string {
	t.Helper()
	code, body := b.get(path)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d", path, code)
	}
	return body
}

// The same confirmation posted twice (a double click, a browser's retry)
// makes one version: the version is made in the transaction that moves the
// entry out of the status the preview showed, so the second finds it
// scheduled, answers 409 and writes nothing.
func TestApproveRepeatedMakesOneVersion(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	e.seed(t, "acme", "TASKS.130", store.Quarantined, `{"a":1}`)
	action := "/entries/TASKS.130/approve"
	b := newBrowser(t, e.srv.URL)
	form := formFields(t, page(t, b, "/entries/TASKS.130"), action, [2]string{"step", "preview"})
	form.Set("payload", `{"a":2}`)
	_, _, preview := b.post(action, form)
	confirm := formFields(t, preview, action, [2]string{"step", "confirm"})
	if code, _, body := b.post(action, confirm); code != http.StatusSeeOther {
		t.Fatalf("confirm = %d:\n%s", code, body)
	}
	if code, _, _ := b.post(action, confirm); code != http.StatusConflict {
		t.Errorf("the same confirmation again = %d, want 409", code)
	}
	en, err := e.st.GetMeta(testenv.Context(t), "TASKS.130")
	if err != nil || len(en.Versions()) != 2 {
		t.Errorf("versions after a repeated confirmation = %d (%v), want 2", len(en.Versions()), err)
	}
}

// Payloads the page cannot edit (binary, text of more than a chunk) take a
// header edit: a version whose bytes are the original's, published as
// they are, listed as "payload unchanged", downloaded byte for byte.
func TestHeaderVersionsOfUneditablePayloads(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	tests := []struct{ name, payload string }{
		{"binary", "\x00\x01\x02\xff\xfe binary \x80\x81"},
		{"text of more than a chunk", strings.Repeat("a line of text\n", 20000)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("TASKS.14%d", i)
			e.seed(t, "acme", id, store.Escalated, tt.payload)
			b := newBrowser(t, e.srv.URL)
			before := e.published(t)
			if code := approveThroughPages(t, b, id, nil, "X-Reviewed: yes"); code != http.StatusSeeOther {
				t.Fatalf("confirm = %d", code)
			}
			e.waitPublished(t, before+1)
			if data, h := e.lastMessage(t); data != tt.payload || !slices.Equal(h["X-Reviewed"], []string{"yes"}) {
				t.Errorf("replay = %d bytes with X-Reviewed %v, want the %d bytes as stored with yes", len(data), h["X-Reviewed"], len(tt.payload))
			}
			v2, _ := elementText(t, page(t, b, "/entries/"+id), "version-2")
			if !strings.Contains(v2, "payload unchanged") || !strings.Contains(v2, "X-Reviewed: yes") {
				t.Errorf("version 2 on the page = %q, want the header set and the payload unchanged", v2)
			}
			for _, n := range []string{"1", "2"} {
				if code, _, body := b.download(fmt.Sprintf("/entries/%s/payload?version=%s", id, n)); code != http.StatusOK || string(body) != tt.payload {
					t.Errorf("download of version %s = %d, %d bytes, want the %d bytes stored", n, code, len(body), len(tt.payload))
				}
			}
			en, err := e.st.Get(ctx, id)
			if err != nil || string(en.Payload) != tt.payload {
				t.Errorf("original after the approval = %d bytes (%v), want it unchanged", len(en.Payload), err)
			}
		})
	}
}

// The tenant API lists the versions of its entry's payload with the author
// as a role, never an operator's identity, and returns any version's
// bytes (?version=N; the original by default).
func TestTenantAPIPayloadVersions(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	acme, globex, _ := e.apiKeys(t)
	e.seed(t, "acme", "TASKS.150", store.Escalated, `{"a":1}`)
	if _, err := e.op.Approve(ctx, "acme", "TASKS.150", operator.Edits{By: authority.Actor{Name: "alice@example.com", Role: authority.Operator}, Payload: []byte(`{"a":2}`)}); err != nil {
		t.Fatal(err)
	}
	url := e.srv.URL + "/api/v1/tenants/acme/entries/TASKS.150"
	type version struct {
		Version int    `json:"version"`
		Base    int    `json:"base"`
		Author  string `json:"author"`
		Size    int64  `json:"size"`
		SHA256  string `json:"sha256"`
	}
	var got struct {
		Payload         []byte    `json:"payload"`
		PayloadVersion  int       `json:"payload_version"`
		ReplayVersion   int       `json:"replay_version"`
		PayloadVersions []version `json:"payload_versions"`
	}
	for q, want := range map[string]string{"": `{"a":1}`, "?version=1": `{"a":1}`, "?version=2": `{"a":2}`} {
		code, body := do(t, "GET", url+q, acme, "")
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || string(got.Payload) != want {
			t.Errorf("GET %s = %d %q (%v), want payload %q", q, code, got.Payload, err, want)
		}
		// Versions and history name roles only.
		if strings.Contains(body, "alice") {
			t.Errorf("GET %s names the operator: %s", q, body)
		}
	}
	if code, body := do(t, "GET", url+"?version=2", acme, ""); code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("GET ?version=2 = %d %s", code, body)
	}
	wantVersions := []version{{1, 0, "capture", 7, store.PayloadSum([]byte(`{"a":1}`))}, {2, 1, "operator", 7, store.PayloadSum([]byte(`{"a":2}`))}}
	if diff := cmp.Diff(wantVersions, got.PayloadVersions); diff != "" || got.ReplayVersion != 2 || got.PayloadVersion != 2 {
		t.Errorf("versions (-want +got):\n%s\nreplay version %d, payload version %d; want 2, 2", diff, got.ReplayVersion, got.PayloadVersion)
	}
	for q, want := range map[string]int{"?version=3": http.StatusNotFound, "?version=0": http.StatusBadRequest, "?version=a": http.StatusBadRequest} {
		if code, body := do(t, "GET", url+q, acme, ""); code != want {
			t.Errorf("GET %s = %d %s, want %d", q, code, body, want)
		}
	}
	if code, _ := do(t, "GET", e.srv.URL+"/api/v1/tenants/globex/entries/TASKS.150?version=2", globex, ""); code != http.StatusNotFound {
		t.Errorf("another tenant's GET ?version=2 = %d, want 404", code)
	}
}
