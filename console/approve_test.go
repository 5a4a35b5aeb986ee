package console_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/storetest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// formFields is what a browser submits for the form of page whose action is
// action, the button name=value pressed: every input (a checkbox only when
// it is checked) and textarea, parsed by an HTML parser (so a textarea's
// content is read as a browser reads it, one newline right after
// <textarea> dropped).
func formFields(t *testing.T, page, action string, button [2]string) url.Values {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	attr := func(n *html.Node, key string) (string, bool) {
		for _, a := range n.Attr {
			if a.Key == key {
				return a.Val, true
			}
		}
		return "", false
	}
	var form *html.Node
	var find func(n *html.Node)
	find = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "form" {
			if a, _ := attr(n, "action"); a == action {
				form = n
			}
		}
		for c := n.FirstChild; c != nil && form == nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	if form == nil {
		t.Fatalf("no form with action %s on the page", action)
	}
	out := url.Values{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			name, named := attr(n, "name")
			switch {
			case n.Data == "input" && named:
				typ, _ := attr(n, "type")
				_, checked := attr(n, "checked")
				if typ == "checkbox" && !checked {
					break
				}
				v, _ := attr(n, "value")
				out.Add(name, v)
			case n.Data == "textarea" && named:
				var b strings.Builder
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					b.WriteString(c.Data)
				}
				out.Add(name, b.String())
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(form)
	out.Set(button[0], button[1])
	return out
}

// An approval through the page's own forms, without touching the payload,
// replays the payload as stored, whatever it is: one the page cannot edit
// (binary, or text of more than one chunk) has no payload field, and a
// missing field keeps the payload (it used to replace it with an empty
// one); an editable one that starts with a newline comes back whole (the
// textarea's parser drops one newline after the tag, so the page writes
// one more).
func TestApproveWithoutEditKeepsThePayload(t *testing.T) {
	tests := []struct {
		name, payload string
		editable      bool
	}{
		{"binary", "\x00\x01\x02\xff\xfe binary \x80\x81", false},
		{"text of more than a chunk", strings.Repeat("a line of text\n", 20000), false},
		{"text starting with a newline", "\nfirst line\nsecond", true},
		{"JSON starting with a newline", "\n{\"a\":1}", true},
		{"JSON", `{"a":1}`, true},
	}
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("TASKS.%d", 50+i)
			e.seed(t, "acme", id, store.Quarantined, tt.payload)
			b := newBrowser(t, e.srv.URL)
			code, page := b.get("/entries/" + id)
			if code != http.StatusOK {
				t.Fatalf("GET /entries/%s = %d", id, code)
			}
			approve := formFields(t, page, "/entries/"+id+"/approve", [2]string{"step", "preview"})
			if _, has := approve["payload"]; has != tt.editable {
				t.Fatalf("approve form has a payload field = %t, want %t", has, tt.editable)
			}
			code, _, preview := b.post("/entries/"+id+"/approve", approve)
			if code != http.StatusOK || !strings.Contains(preview, "Unchanged.") {
				t.Fatalf("preview = %d, want the payload unchanged:\n%s", code, preview)
			}
			confirm := formFields(t, preview, "/entries/"+id+"/approve", [2]string{"step", "confirm"})
			if code, loc, body := b.post("/entries/"+id+"/approve", confirm); code != http.StatusSeeOther {
				t.Fatalf("confirm = %d %s %s", code, loc, body)
			}
			en, err := e.st.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			note := en.History[len(en.History)-1].Note
			if string(en.Payload) != tt.payload || strings.Contains(note, "payload edited") {
				t.Errorf("approved payload = %d bytes (sha256 %s), want the stored %d bytes unchanged; history: %s",
					len(en.Payload), store.PayloadSum(en.Payload), len(tt.payload), note)
			}
		})
	}
}

// A payload field sent for a payload the page cannot edit is refused, and
// the entry stays where it was: the field can only come from a hand-made
// request, and taking it would replace bytes nobody saw.
func TestApproveRefusesAnEditOfAnUneditablePayload(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	binary := "\x00\x01\x02\xff\xfe binary \x80\x81"
	e.seed(t, "acme", "TASKS.80", store.Quarantined, binary)
	b := newBrowser(t, e.srv.URL)
	b.get("/entries/TASKS.80")
	for _, step := range []string{"preview", "confirm"} {
		code, _, body := b.post("/entries/TASKS.80/approve", url.Values{"csrf": {b.csrf}, "payload": {"replaced"}, "headers": {""}, "step": {step}})
		if code != http.StatusBadRequest || !strings.Contains(body, "cannot be edited here") {
			t.Errorf("approve (%s) with a payload field = %d, want 400 saying it cannot be edited:\n%s", step, code, regexp.MustCompile(`\s+`).ReplaceAllString(body, " "))
		}
	}
	en, err := e.st.Get(testenv.Context(t), "TASKS.80")
	if err != nil {
		t.Fatal(err)
	}
	if en.Status != store.Quarantined || string(en.Payload) != binary {
		t.Errorf("entry after the refusals = %s with %d bytes, want quarantined with the stored payload", en.Status, len(en.Payload))
	}
}

// A confirmation approves the decision its preview showed: an entry
// approved elsewhere meanwhile and escalated again (its replay refused) is
// the same status, but another question, and the stale confirmation is a
// 409 that changes nothing.
func TestApproveConfirmsThePreviewedDecision(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	ctx := testenv.Context(t)
	e.seed(t, "acme", "TASKS.90", store.Escalated, `{"a":1}`)
	b := newBrowser(t, e.srv.URL)
	_, page := b.get("/entries/TASKS.90")
	code, _, preview := b.post("/entries/TASKS.90/approve", formFields(t, page, "/entries/TASKS.90/approve", [2]string{"step", "preview"}))
	if code != http.StatusOK {
		t.Fatalf("preview = %d", code)
	}
	confirm := formFields(t, preview, "/entries/TASKS.90/approve", [2]string{"step", "confirm"})
	if confirm.Get("since") == "" {
		t.Fatalf("the confirm form carries no since: %v", confirm)
	}
	// Bob's approval and the replay's refusal, as their moves (no task).
	if _, err := e.st.Transition(ctx, "TASKS.90", store.Change{From: []store.Status{store.Escalated}, To: store.Scheduled, By: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Refuse(ctx, e.st, "TASKS.90", store.Escalated, "bob", ""); err != nil {
		t.Fatal(err)
	}
	if code, _, body := b.post("/entries/TASKS.90/approve", confirm); code != http.StatusConflict {
		t.Errorf("stale confirmation = %d, want 409:\n%s", code, body)
	}
	garbled := maps.Clone(confirm)
	garbled.Set("since", "yesterday")
	if code, _, body := b.post("/entries/TASKS.90/approve", garbled); code != http.StatusBadRequest || !strings.Contains(body, "is not a time") {
		t.Errorf("confirmation with a garbled since = %d, want 400 saying so:\n%s", code, body)
	}
	if got, err := e.st.GetMeta(ctx, "TASKS.90"); err != nil || got.Status != store.Escalated {
		t.Errorf("entry after the stale confirmation = %+v, %v, want still escalated", got, err)
	}
	// The current question, previewed again, is approved.
	_, page = b.get("/entries/TASKS.90")
	_, _, preview = b.post("/entries/TASKS.90/approve", formFields(t, page, "/entries/TASKS.90/approve", [2]string{"step", "preview"}))
	if code, _, body := b.post("/entries/TASKS.90/approve", formFields(t, preview, "/entries/TASKS.90/approve", [2]string{"step", "confirm"})); code != http.StatusSeeOther {
		t.Errorf("confirmation of the current decision = %d, want 303:\n%s", code, body)
	}
}
