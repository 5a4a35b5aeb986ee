package console_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/secrettest"
	"github.com/jsdlq/jsdlq/internal/storetest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/auth"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// The document is served without a key, byte for byte the committed file,
// and is valid OpenAPI 3.1 by the validator's own check of the
// specification's schema.
func TestOpenAPIDocument(t *testing.T) {
	e := newEnv(t, nil)
	code, body, answer := exchange(t, "GET", e.srv.URL+"/api/v1/openapi.json", "", "")
	file, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || body != string(file) || answer != "getOpenAPI 200" {
		t.Errorf("GET /api/v1/openapi.json without a key = %d, %d bytes (%s), want 200 and the %d bytes of openapi.json", code, len(body), answer, len(file))
	}
	s := loadSpec(t)
	if ok, errs := s.validator.ValidateDocument(); !ok {
		t.Errorf("openapi.json is not a valid OpenAPI document: %s", validationErrors(errs))
	}
	if v := s.doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi.json's version = %q, want 3.1.x", v)
	}
}

// Every documented answer of every route (each success and each error
// status) is produced by the real server and validated, with its request,
// against the document: the coverage is checked against the document's own
// list, so a route or status added to either side without the other fails.
func TestTenantAPIMatchesOpenAPI(t *testing.T) {
	box, _ := secrettest.Box(t)
	e := newEnv(t, nil, console.WithWebhookGuard(webhook.NewGuard(webhook.WithOwnURLs("https://jsdlq-api.example.com"))), console.WithSecrets(box))
	ctx := testenv.Context(t)
	acme, _, _ := e.apiKeys(t)
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{"a":1}`)
	e.seed(t, "acme", "TASKS.2", store.Scheduled, `{"a":2}`)
	e.seed(t, "acme", "TASKS.3", store.Discarded, `{"a":3}`)
	e.seed(t, "acme", "TASKS.4", store.Escalated, "", func(en *store.Entry) {
		// What only an advisory tells: no failure record, no headers, no
		// payload.
		en.Failure, en.Headers, en.Payload, en.PayloadMissing, en.Kind = nil, nil, nil, true, string(jevent.KindMaxDeliver)
	})
	e.seed(t, "globex", "TASKS.5", store.AwaitingApproval, `{"g":5}`)
	// A governance denial: its rule keeps it from tenant keys.
	e.seed(t, "acme", "TASKS.6", store.AwaitingApproval, `{"a":6}`, ruled("governance", triage.Governance))
	hook, _, err := hooksecret.Create(ctx, e.st, box, "acme", "https://hooks.acme.example/old", "ops@example.com")
	if err != nil {
		t.Fatal(err)
	}
	// A console with no key to seal webhook secrets: adding one is a 503.
	unsealed := httptest.NewServer(console.New(e.st, e.op, nil).Handler())
	t.Cleanup(unsealed.Close)

	// A console whose store fails: every route's 500.
	broken, _ := testenv.Firestore(t)
	broken.Close()
	down := httptest.NewServer(console.New(store.New(broken), e.op, nil).Handler())
	t.Cleanup(down.Close)

	// The triage endpoint: a console that serves it, one whose store
	// fails, one that cannot fetch the keys its tokens are verified with.
	e.seed(t, "acme", "TASKS.7", store.Escalated, `{"a":7}`)
	tri, triDown := e.triageServer(t, nil).URL+agentkit.TriagePath, e.triageServer(t, store.New(broken)).URL+agentkit.TriagePath
	triNoKeys := e.triageServer(t, nil, auth.WithJWKSURL("http://127.0.0.1:1/jwks")).URL + agentkit.TriagePath
	tok := e.token(t, triageSA, triageAudience)
	answer := func(tenant, id string, st store.Status, a agentkit.TriageAnswer) string {
		return triageBody(t, e.triageTask(t, tenant, id, st), a)
	}
	replay7 := answer("acme", "TASKS.7", store.Escalated, agentkit.ReplayAnswer([]byte(`{"a":70}`), map[string]string{"X-Fix": "1"}))

	api, other := e.srv.URL+"/api/v1/tenants/acme", e.srv.URL+"/api/v1/tenants/globex"
	calls := []struct {
		method, url, key, body string
		want                   int
	}{
		{"GET", e.srv.URL + "/api/v1/openapi.json", "", "", 200},
		{"GET", api + "/entries?page_size=2&status=awaiting_approval&category=transient&reason=timeout&agent=writer", acme, "", 200},
		{"GET", api + "/entries?status=everything", acme, "", 400},
		{"GET", api + "/entries", "", "", 401},
		{"GET", other + "/entries", acme, "", 404},
		{"GET", down.URL + "/api/v1/tenants/acme/entries", acme, "", 500},
		{"GET", api + "/entries/TASKS.1", acme, "", 200},
		{"GET", api + "/entries/TASKS.4", acme, "", 200},
		{"GET", api + "/entries/TASKS.1?version=1", acme, "", 200},
		{"GET", api + "/entries/TASKS%252E1", acme, "", 400},
		{"GET", api + "/entries/TASKS.1?version=0", acme, "", 400},
		{"GET", api + "/entries/TASKS.1?version=9", acme, "", 404},
		{"GET", api + "/entries/TASKS.1", "", "", 401},
		{"GET", api + "/entries/TASKS.5", acme, "", 404},
		{"GET", down.URL + "/api/v1/tenants/acme/entries/TASKS.1", acme, "", 500},
		{"POST", api + "/entries/TASKS.1:replay", acme, `{"reason":"the fix is deployed"}`, 200},
		{"POST", api + "/entries/TASKS%252E2:replay", acme, "", 400},
		{"POST", api + "/entries/TASKS.2:replay", "", "", 401},
		{"POST", other + "/entries/TASKS.5:replay", acme, "", 404},
		{"POST", api + "/entries/TASKS.3:replay", acme, "", 409},
		{"POST", api + "/entries/TASKS.6:replay", acme, "", 403},
		{"POST", down.URL + "/api/v1/tenants/acme/entries/TASKS.2:replay", acme, "", 500},
		{"POST", api + "/entries/TASKS.2:discard", acme, `{"reason":"obsolete"}`, 200},
		{"POST", api + "/entries/TASKS.4:discard", acme, `{}`, 400},
		{"POST", api + "/entries/TASKS.4:discard", "", `{"reason":"x"}`, 401},
		{"POST", api + "/entries/TASKS.5:discard", acme, `{"reason":"x"}`, 404},
		{"POST", api + "/entries/TASKS.3:discard", acme, `{"reason":"again"}`, 409},
		{"POST", api + "/entries/TASKS.6:discard", acme, `{"reason":"not needed"}`, 403},
		{"POST", down.URL + "/api/v1/tenants/acme/entries/TASKS.4:discard", acme, `{"reason":"x"}`, 500},
		{"GET", api + "/webhooks", acme, "", 200},
		{"GET", api + "/webhooks", "", "", 401},
		{"GET", e.srv.URL + "/api/v1/tenants/acme%E2%80%AE/webhooks", acme, "", 400}, // a tenant no name can be
		{"GET", other + "/webhooks", acme, "", 404},
		{"GET", down.URL + "/api/v1/tenants/acme/webhooks", acme, "", 500},
		{"POST", api + "/webhooks", acme, `{"url":"https://hooks.acme.example/jsdlq"}`, 201},
		{"POST", api + "/webhooks", acme, `{"url":"http://hooks.acme.example/"}`, 400},
		{"POST", api + "/webhooks", "", `{"url":"https://hooks.acme.example/x"}`, 401},
		{"POST", other + "/webhooks", acme, `{"url":"https://hooks.acme.example/x"}`, 404},
		{"POST", api + "/webhooks", acme, `{"url":"https://hooks.acme.example/old"}`, 409},
		{"POST", unsealed.URL + "/api/v1/tenants/acme/webhooks", acme, `{"url":"https://hooks.acme.example/x"}`, 503},
		{"POST", down.URL + "/api/v1/tenants/acme/webhooks", acme, `{"url":"https://hooks.acme.example/x"}`, 500},
		{"DELETE", api + "/webhooks/" + hook.ID, acme, "", 200},
		{"DELETE", api + "/webhooks/" + hook.ID, "", "", 401},
		{"DELETE", api + "/webhooks/x%FF", acme, "", 400},
		{"DELETE", api + "/webhooks/" + hook.ID, acme, "", 404},
		{"DELETE", down.URL + "/api/v1/tenants/acme/webhooks/" + hook.ID, acme, "", 500},
		{"POST", tri, tok, `{"answer":"replay"}`, 400},
		{"POST", tri, "", replay7, 401},
		{"POST", tri, tok, answer("acme", "TASKS.6", store.AwaitingApproval, agentkit.Approve(nil, nil)), 403},
		{"POST", tri, tok, answer("acme", "TASKS.5", store.AwaitingApproval, agentkit.Approve(nil, nil)), 404},
		{"POST", tri, tok, answer("acme", "TASKS.3", store.Escalated, agentkit.ReplayAnswer(nil, nil)), 409},
		{"POST", tri, tok, answer("acme", "TASKS.4", store.Escalated, agentkit.ReplayAnswer(nil, nil)), 422},
		{"POST", triDown, tok, replay7, 500},
		{"POST", triNoKeys, tok, replay7, 503},
		{"POST", tri, tok, replay7, 200},
		// Paths the document does not have answer its Error as a 404.
		{"GET", e.srv.URL + "/api/v1/tenants/acme/breakers", acme, "", 404},
		{"POST", api + "/entries/TASKS.1:approve", acme, "", 404},
	}
	seen := map[string]bool{}
	codes := map[string]bool{}
	for _, c := range calls {
		code, body, answer := exchange(t, c.method, c.url, c.key, c.body)
		if code != c.want {
			t.Errorf("%s %s = %d %s, want %d", c.method, c.url, code, body, c.want)
		}
		seen[answer] = true
		var eb struct {
			Error struct{ Code string } `json:"error"`
		}
		if code >= 400 && json.Unmarshal([]byte(body), &eb) == nil {
			codes[eb.Error.Code] = true
		}
	}

	s := loadSpec(t)
	var documented []string
	for path, item := range s.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			if op.OperationId == "" {
				t.Errorf("%s %s has no operationId", method, path)
			}
			for status := range op.Responses.Codes.KeysFromOldest() {
				documented = append(documented, op.OperationId+" "+status)
			}
		}
	}
	var missed []string
	for _, d := range documented {
		if !seen[d] {
			missed = append(missed, d)
		}
	}
	if len(documented) < 30 || len(missed) > 0 {
		t.Errorf("of the document's %d answers these were not produced: %v", len(documented), missed)
	}
	errCode, _ := s.model.Components.Schemas.Get("ErrorCode")
	var enum []string
	for _, v := range errCode.Schema().Enum {
		enum = append(enum, v.Value)
	}
	if d := cmp.Diff(enum, slices.Sorted(maps.Keys(codes)), cmpSorted); d != "" {
		t.Errorf("error codes documented (-) and answered (+):\n%s", d)
	}
}

var cmpSorted = cmp.Transformer("sorted", func(s []string) []string { return slices.Sorted(slices.Values(s)) })

// The validation is not vacuous: the storage structs' JSON, a null list, a
// zero time and an operator's name where a role belongs are each refused.
func TestOpenAPIRefusesStorageShapes(t *testing.T) {
	s := loadSpec(t)
	good := `{"at":"2026-01-02T03:04:05Z","from":"awaiting_approval","to":"scheduled","actor_role":"operator","note":"approved by operator"}`
	entry := func(history string) string {
		return `{"entry":{"id":"TASKS.1","event_id":"TASKS.1","stream":"TASKS","stream_seq":1,"tenant":"acme","status":"scheduled",` +
			`"category":"transient","reason_code":"timeout","action":"auto_replay","policy_version":"v","replays":0,"root_id":"TASKS.1",` +
			`"payload_size":2,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z","headers":{},` +
			`"replay_version":1,"payload_versions":[],"payload_missing":false,"payload_truncated":false,"kinds":[],"history":` + history + `}}`
	}
	stored, err := json.Marshal(map[string]any{"entry": &store.Entry{ID: "TASKS.1", Status: store.Scheduled,
		History: []store.Transition{{To: "scheduled", By: "alice@example.com"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, body string
		ok         bool
	}{
		{"the wire type", entry(`[` + good + `]`), true},
		{"the storage struct", string(stored), false},
		{"a null list", entry(`null`), false},
		{"an actor's name", entry(`[` + strings.Replace(good, `"actor_role":"operator"`, `"by":"alice@example.com"`, 1) + `]`), false},
		{"a role the document does not know", entry(`[` + strings.Replace(good, `"operator"`, `"alice@example.com"`, 1) + `]`), false},
		{"a null time", strings.Replace(entry(`[`+good+`]`), `"headers":{}`, `"headers":{},"resolved_at":null`, 1), false},
		{"a null headers object", strings.Replace(entry(`[`+good+`]`), `"headers":{}`, `"headers":null`, 1), false},
	} {
		req := httptest.NewRequest("POST", "/api/v1/tenants/acme/entries/TASKS.1:replay", nil)
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "application/json; charset=utf-8")
		rec.WriteHeader(http.StatusOK)
		rec.WriteString(tt.body)
		ok, errs := s.validator.ValidateHttpResponse(req, rec.Result())
		if ok != tt.ok {
			t.Errorf("%s: valid = %v, want %v (%s)", tt.name, ok, tt.ok, validationErrors(errs))
		}
	}
}

// No answer of the API names an operator, a dlqctl user, the triage agent
// or a tenant key: history and webhooks show roles, and notes that named
// whoever acted name the role. No answer holds a zero time or a null, and
// lists are [] when empty.
func TestTenantAPIShowsRolesNotIdentities(t *testing.T) {
	box, _ := secrettest.Box(t)
	e := newEnv(t, nil, console.WithWebhookGuard(webhook.NewGuard(webhook.WithOwnURLs("https://jsdlq-api.example.com"))), console.WithSecrets(box))
	ctx := testenv.Context(t)
	key, keyID, err := e.st.CreateTenantKey(ctx, "acme", "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	globex, _, err := e.st.CreateTenantKey(ctx, "globex", "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range []store.Status{store.AwaitingApproval, store.Scheduled, store.Escalated, store.AwaitingApproval, store.AwaitingApproval} {
		e.seed(t, "acme", fmt.Sprintf("TASKS.%d", i+1), st, `{}`)
	}
	e.seed(t, "acme", "TASKS.6", store.Escalated, "", func(en *store.Entry) {
		en.Failure, en.Headers, en.Payload, en.PayloadMissing = &jevent.Failure{Code: "timeout"}, nil, nil, true
	})
	// History as the operator's actions write it (shared/operator): by the
	// actor's name, with the name in the note, bare or with its role.
	triage := agentkit.TriageActor("ceo")
	for _, c := range []struct {
		id       string
		from, to store.Status
		by, note string
	}{
		{"TASKS.1", store.AwaitingApproval, store.Scheduled, "alice@example.com", "approved by alice@example.com"},
		{"TASKS.2", store.Scheduled, store.Scheduled, "dlqctl:bob", "replay now requested by dlqctl:bob"},
		{"TASKS.3", store.Escalated, store.Discarded, "carol@example.com", "discarded: duplicate of TASKS.1"},
		{"TASKS.4", store.AwaitingApproval, store.Scheduled, triage, "approved by " + triage + " (triage_agent)"},
	} {
		if _, err := e.st.Transition(ctx, c.id, store.Change{From: []store.Status{c.from}, To: c.to, By: c.by, Note: c.note}); err != nil {
			t.Fatal(err)
		}
	}
	hook, _, err := hooksecret.Create(ctx, e.st, box, "acme", "https://hooks.acme.example/ops", "erin@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.RecordWebhookAttempt(ctx, hook.ID, store.WebhookAttempt{OK: true, Status: 204}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.RecordWebhookAttempt(ctx, hook.ID, store.WebhookAttempt{Status: 503, Error: "503 from the receiver"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.EnableWebhook(ctx, "acme", hook.ID, "frank@example.com"); err != nil {
		t.Fatal(err)
	}

	var answers []string
	call := func(method, path, key, body string, want int) string {
		t.Helper()
		code, b := do(t, method, e.srv.URL+path, key, body)
		if code != want {
			t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
		}
		answers = append(answers, method+" "+path+"\n"+b)
		return b
	}
	call("POST", "/api/v1/tenants/acme/entries/TASKS.5:replay", key, "", 200)
	call("POST", "/api/v1/tenants/acme/webhooks", key, `{"url":"https://hooks.acme.example/tenant"}`, 201)
	call("GET", "/api/v1/tenants/acme/entries", key, "", 200)
	type history struct {
		History []struct {
			ActorRole string `json:"actor_role"`
			Note      string `json:"note"`
		} `json:"history"`
	}
	entries := map[string]history{}
	for i := range 6 {
		id := fmt.Sprintf("TASKS.%d", i+1)
		var en history
		if err := json.Unmarshal([]byte(call("GET", "/api/v1/tenants/acme/entries/"+id, key, "", 200)), &en); err != nil {
			t.Fatal(err)
		}
		entries[id] = en
	}
	hooks := call("GET", "/api/v1/tenants/acme/webhooks", key, "", 200)
	emptyList := call("GET", "/api/v1/tenants/globex/entries", globex, "", 200)
	emptyHooks := call("GET", "/api/v1/tenants/globex/webhooks", globex, "", 200)

	for _, a := range answers {
		for _, who := range []string{"@example.com", "alice", "dlqctl:", "bob", triage, "tenant-api:", keyID, "0001-01-01"} {
			if strings.Contains(a, who) {
				t.Errorf("an answer holds %q:\n%s", who, a)
			}
		}
		_, body, _ := strings.Cut(a, "\n")
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if p := nullAt(v, "$"); p != "" {
			t.Errorf("an answer has null at %s:\n%s", p, a)
		}
	}

	// The recording and the action (its note up to the payload version an
	// approval adds); the replay function's own steps (system) may follow,
	// as fast as the replays run.
	type step struct{ Role, Note string }
	got := map[string][]step{}
	for id, en := range entries {
		for _, h := range en.History[:min(2, len(en.History))] {
			note, _, _ := strings.Cut(h.Note, "; payload v")
			got[id] = append(got[id], step{h.ActorRole, note})
		}
	}
	want := map[string][]step{
		"TASKS.1": {{"system", ""}, {"operator", "approved by operator"}},
		"TASKS.2": {{"system", ""}, {"operator", "replay now requested by operator"}},
		"TASKS.3": {{"system", ""}, {"operator", "discarded: duplicate of TASKS.1"}},
		"TASKS.4": {{"system", ""}, {"triage_agent", "approved by triage_agent"}},
		"TASKS.5": {{"system", ""}, {"tenant", "approved by tenant"}},
		"TASKS.6": {{"system", ""}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("history as the API shows it (-want +got):\n%s", d)
	}
	var wh struct {
		Webhooks []map[string]any `json:"webhooks"`
	}
	if err := json.Unmarshal([]byte(hooks), &wh); err != nil {
		t.Fatal(err)
	}
	roles := map[string][2]any{}
	for _, w := range wh.Webhooks {
		roles[w["url"].(string)] = [2]any{w["created_by_role"], w["enabled_by_role"]}
	}
	wantRoles := map[string][2]any{
		"https://hooks.acme.example/ops":    {"operator", "operator"},
		"https://hooks.acme.example/tenant": {"tenant", nil},
	}
	if d := cmp.Diff(wantRoles, roles); d != "" {
		t.Errorf("webhooks' roles (-want +got):\n%s", d)
	}
	for _, tt := range []struct{ name, body, want string }{
		{"no entries", emptyList, `"entries": []`},
		{"no webhooks", emptyHooks, `"webhooks": []`},
		{"no headers", entryAnswer(answers, "TASKS.6"), `"headers": {}`},
		{"no completed steps", entryAnswer(answers, "TASKS.6"), `"completed_steps": []`},
	} {
		if !strings.Contains(tt.body, tt.want) {
			t.Errorf("%s: the answer lacks %s:\n%s", tt.name, tt.want, tt.body)
		}
	}
}

// entryAnswer is the answer of GET …/entries/{id} among answers.
func entryAnswer(answers []string, id string) string {
	for _, a := range answers {
		if strings.HasPrefix(a, "GET /api/v1/tenants/acme/entries/"+id+"\n") {
			return a
		}
	}
	return ""
}

// nullAt is the path of the first null in a decoded JSON value, or "".
func nullAt(v any, path string) string {
	switch v := v.(type) {
	case nil:
		return path
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if p := nullAt(v[k], path+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, x := range v {
			if p := nullAt(x, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// A note may name someone besides whoever made its move: an approval of an
// entry that replays an earlier edit names that edit's author ("payload v2
// (by alice@example.com (approver), …)"). The API shows every actor the
// entry records (the movers and the versions' authors) by role, in every
// note, whoever the note's own move was made by.
func TestTenantAPINotesNameNoEarlierAuthor(t *testing.T) {
	e := newEnv(t, nil)
	ctx := testenv.Context(t)
	key, _, err := e.st.CreateTenantKey(ctx, "acme", "ops")
	if err != nil {
		t.Fatal(err)
	}
	e.seed(t, "acme", "TASKS.1", store.Escalated, `{"a":1}`)
	// An approver's edit (as shared/operator writes it, without its task:
	// the test moves the entry on by hand), and an escalation again after
	// the replay was refused.
	alice := "alice@example.com"
	if _, err := e.st.TransitionScoped(ctx, "TASKS.1", store.AllTenants, store.Change{From: []store.Status{store.Escalated}, To: store.Scheduled,
		By: alice, Role: "approver", Note: store.ApprovalNote + " by " + alice + " (approver)"},
		&store.Edit{Payload: []byte(`{"a":2}`), By: alice, Role: "approver"}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Refuse(ctx, e.st, "TASKS.1", store.Escalated, "replay", "refused"); err != nil {
		t.Fatal(err)
	}
	// The tenant approves the entry again (its rule grants tenants), without
	// an edit: the note names the version it replays, and its author.
	if code, b := do(t, "POST", e.srv.URL+"/api/v1/tenants/acme/entries/TASKS.1:replay", key, ""); code != http.StatusOK {
		t.Fatalf("POST :replay = %d %s", code, b)
	}
	stored, err := e.st.Get(ctx, "TASKS.1")
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for _, h := range stored.History {
		named = named || h.By != alice && strings.Contains(h.Note, alice)
	}
	if !named {
		t.Fatalf("no note of another actor names %s: the test no longer makes the case it is about\n%+v", alice, stored.History)
	}
	code, b := do(t, "GET", e.srv.URL+"/api/v1/tenants/acme/entries/TASKS.1", key, "")
	if code != http.StatusOK {
		t.Fatalf("GET = %d %s", code, b)
	}
	if strings.Contains(b, "alice") || strings.Contains(b, "@example.com") {
		t.Errorf("GET …/entries/TASKS.1 names the approver:\n%s", b)
	}
	if !strings.Contains(b, "(by approver, ") {
		t.Errorf("GET …/entries/TASKS.1 does not name the earlier version's author by role:\n%s", b)
	}
}
