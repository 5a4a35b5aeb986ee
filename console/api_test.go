package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Every forged, revoked, malformed or cross-tenant request is refused with
// the documented status and JSON error, and Firestore, the replay queue and
// the work stream are exactly as before.
func TestTenantAPIRefusesAndChangesNothing(t *testing.T) {
	e := newEnv(t, nil)
	acmeKey, globexKey, revoked := e.apiKeys(t)
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{"a":1}`)
	e.seed(t, "acme", "TASKS.2", store.Scheduled, `{"a":2}`)
	e.seed(t, "globex", "TASKS.3", store.AwaitingApproval, `{"g":3}`)
	e.seed(t, "globex", "TASKS.4", store.Scheduled, `{"g":4}`)
	e.seed(t, "acme/x", "TASKS.5", store.AwaitingApproval, `{}`)

	// A page token of globex's listing, to replay against acme's.
	code, body := do(t, "GET", e.srv.URL+"/api/v1/tenants/globex/entries?page_size=1", globexKey, "")
	var gp struct {
		NextPageToken string `json:"next_page_token"`
	}
	if err := json.Unmarshal([]byte(body), &gp); code != 200 || err != nil || gp.NextPageToken == "" {
		t.Fatalf("globex list = %d %s, want a next page token", code, body)
	}
	// And one of acme's own listing, made with another of acme's keys: a
	// token is bound to the key that listed.
	acme2, _, err := e.st.CreateTenantKey(testenv.Context(t), "acme", "test")
	if err != nil {
		t.Fatal(err)
	}
	code, body = do(t, "GET", e.srv.URL+"/api/v1/tenants/acme/entries?page_size=1", acme2, "")
	var ap struct {
		NextPageToken string `json:"next_page_token"`
	}
	if err := json.Unmarshal([]byte(body), &ap); code != 200 || err != nil || ap.NextPageToken == "" {
		t.Fatalf("acme list = %d %s, want a next page token", code, body)
	}
	unsigned, _, _ := strings.Cut(ap.NextPageToken, ".")
	secret := acmeKey[len(acmeKey)-43:]
	id := acmeKey[len("jsdlq_") : len("jsdlq_")+16]
	wrongSecret := acmeKey[:len(acmeKey)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(acmeKey, "A")]
	base := e.srv.URL + "/api/v1/tenants/"

	before := e.snapshot(t)
	attempts := []struct {
		name, method, path, key, body string
		want                          int
	}{
		{"no key", "GET", "acme/entries", "", "", 401},
		{"no key, replay", "POST", "acme/entries/TASKS.1:replay", "", "", 401},
		{"revoked key, list", "GET", "acme/entries", revoked, "", 401},
		{"revoked key, replay", "POST", "acme/entries/TASKS.1:replay", revoked, "", 401},
		{"revoked key, discard", "POST", "acme/entries/TASKS.2:discard", revoked, `{"reason":"x"}`, 401},
		{"wrong secret", "POST", "acme/entries/TASKS.1:replay", wrongSecret, "", 401},
		{"unknown key id", "GET", "acme/entries", "jsdlq_0123456789abcdef_" + secret, "", 401},
		{"malformed key", "GET", "acme/entries", "not-a-key", "", 401},
		{"key id only", "GET", "acme/entries", "jsdlq_" + id, "", 401},
		{"other tenant's path, list", "GET", "globex/entries", acmeKey, "", 404},
		{"other tenant's path, get", "GET", "globex/entries/TASKS.3", acmeKey, "", 404},
		{"other tenant's path, replay", "POST", "globex/entries/TASKS.3:replay", acmeKey, "", 404},
		{"other tenant's path, discard", "POST", "globex/entries/TASKS.4:discard", acmeKey, `{"reason":"x"}`, 404},
		{"other tenant's entry under own path, get", "GET", "acme/entries/TASKS.3", acmeKey, "", 404},
		{"other tenant's entry under own path, replay", "POST", "acme/entries/TASKS.3:replay", acmeKey, "", 404},
		{"other tenant's entry under own path, discard", "POST", "acme/entries/TASKS.4:discard", acmeKey, `{"reason":"x"}`, 404},
		{"tenant path with a slash", "GET", url.PathEscape("acme/x") + "/entries/TASKS.5", acmeKey, "", 404},
		{"escaped path in entry id", "POST", "acme/entries/" + url.PathEscape("..%2Ffailure-log%2FTASKS.3") + ":replay", acmeKey, "", 404},
		{"non-canonical entry id", "POST", "acme/entries/TASKS%252E3:replay", acmeKey, "", 400},
		{"dot-dot entry id", "GET", "acme/entries/..", acmeKey, "", 404},
		{"unknown action", "POST", "acme/entries/TASKS.1:approve", acmeKey, "", 404},
		{"discard without reason", "POST", "acme/entries/TASKS.2:discard", acmeKey, `{}`, 400},
		{"discard with unknown field", "POST", "acme/entries/TASKS.2:discard", acmeKey, `{"reason":"x","tenant":"globex"}`, 400},
		{"discard, not JSON", "POST", "acme/entries/TASKS.2:discard", acmeKey, `reason=x`, 400},
		{"discard, a stray brace after the body", "POST", "acme/entries/TASKS.2:discard", acmeKey, `{"reason":"x"}}`, 400},
		{"discard, a stray bracket after the body", "POST", "acme/entries/TASKS.2:discard", acmeKey, `{"reason":"x"}]`, 400},
		{"unknown filter", "GET", "acme/entries?tenant=globex", acmeKey, "", 400},
		{"unknown status", "GET", "acme/entries?status=everything", acmeKey, "", 400},
		{"oversized page", "GET", "acme/entries?page_size=100000", acmeKey, "", 400},
		{"negative page", "GET", "acme/entries?page_size=-1", acmeKey, "", 400},
		{"repeated filter", "GET", "acme/entries?status=held&status=scheduled", acmeKey, "", 400},
		{"garbled page token", "GET", "acme/entries?page_token=%%%", acmeKey, "", 400},
		{"forged page token", "GET", "acme/entries?page_token=" + store.Cursor{ID: "../x"}.Encode(), acmeKey, "", 400},
		{"other tenant's page token", "GET", "acme/entries?page_token=" + gp.NextPageToken, acmeKey, "", 400},
		{"own tenant's page token of another key", "GET", "acme/entries?page_token=" + ap.NextPageToken, acmeKey, "", 400},
		{"own entry's cursor, unsigned", "GET", "acme/entries?page_token=" + unsigned, acmeKey, "", 400},
		{"other tenant's key on own path", "POST", "acme/entries/TASKS.1:replay", globexKey, "", 404},
	}
	for _, a := range attempts {
		code, body := do(t, a.method, base+a.path, a.key, a.body)
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if code != a.want || json.Unmarshal([]byte(body), &eb) != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Errorf("%s: %s %s = %d %s, want %d with a JSON error", a.name, a.method, a.path, code, body, a.want)
		}
		if strings.Contains(body, "globex") && !strings.Contains(a.path, "globex") {
			t.Errorf("%s: the answer names another tenant: %s", a.name, body)
		}
	}
	if len(attempts) < 20 {
		t.Fatalf("%d attempts, want at least 20", len(attempts))
	}
	// 404s reveal nothing: another tenant's entry reads exactly like a
	// missing one.
	_, other := do(t, "GET", base+"acme/entries/TASKS.3", acmeKey, "")
	_, missing := do(t, "GET", base+"acme/entries/TASKS.999", acmeKey, "")
	if other != missing {
		t.Errorf("another tenant's entry answers %s, a missing one %s: they must be alike", other, missing)
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("refused requests changed state (-before +after):\n%s", diff)
	}
}

// A page token stays good when the entry it names is deleted (Firestore's
// TTL expires entries while a client pages): it is checked by its
// signature, not by reading that entry, so the listing goes on with what
// is left, and nothing about other tenants' entries can be learnt from
// which tokens are refused.
func TestTenantAPIPageTokenOutlivesItsEntry(t *testing.T) {
	e := newEnv(t, nil)
	ctx := testenv.Context(t)
	key, _, _ := e.apiKeys(t)
	for i := range 3 {
		e.seed(t, "acme", fmt.Sprintf("TASKS.%d", i+1), store.Escalated, `{}`)
	}
	base := e.srv.URL + "/api/v1/tenants/acme/entries?page_size=1"
	first := listPage(t, base, key, "")
	if len(first.Entries) != 1 || first.Next == "" {
		t.Fatalf("first page = %+v, want one entry and a next page", first)
	}
	if _, err := e.fs.Collection(store.FailureLog).Doc(first.Entries[0].ID).Delete(ctx); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for tok := first.Next; tok != ""; {
		p := listPage(t, base, key, tok)
		for _, en := range p.Entries {
			rest = append(rest, en.ID)
		}
		tok = p.Next
	}
	if want := []string{"TASKS.2", "TASKS.1"}; !slices.Equal(rest, want) {
		t.Errorf("pages after the first one's entry expired = %v, want %v", rest, want)
	}
}

// The tenant's own requests work: list (scoped, paged), get with payload,
// replay of an entry waiting for approval lands on the work stream, discard
// with a reason; history names the key.
func TestTenantAPIOwnEntries(t *testing.T) {
	e := newEnv(t, nil)
	ctx := testenv.Context(t)
	key, keyID, err := e.st.CreateTenantKey(ctx, "acme", "test")
	if err != nil {
		t.Fatal(err)
	}
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{"a":1}`)
	e.seed(t, "acme", "TASKS.2", store.Scheduled, `{"a":2}`)
	e.seed(t, "globex", "TASKS.3", store.AwaitingApproval, `{"g":3}`)
	base := e.srv.URL + "/api/v1/tenants/acme/entries"

	var seen []string
	tok := ""
	for range 3 {
		p := listPage(t, base+"?page_size=1", key, tok)
		for _, en := range p.Entries {
			seen = append(seen, en.ID+"/"+en.Tenant)
		}
		if tok = p.Next; tok == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"TASKS.2/acme", "TASKS.1/acme"}, seen); diff != "" {
		t.Errorf("paged list of acme (-want +got):\n%s", diff)
	}
	code, body := do(t, "GET", base+"?status=awaiting_approval", key, "")
	if code != 200 || !strings.Contains(body, "TASKS.1") || strings.Contains(body, "TASKS.2") {
		t.Errorf("list ?status=awaiting_approval = %d %s", code, body)
	}
	code, body = do(t, "GET", base+"/TASKS.1", key, "")
	var got struct {
		ID      string `json:"id"`
		Payload []byte `json:"payload"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.ID != "TASKS.1" || string(got.Payload) != `{"a":1}` {
		t.Errorf("get TASKS.1 = %d %s", code, body)
	}

	n := e.published(t)
	if code, body := do(t, "POST", base+"/TASKS.1:replay", key, ""); code != 200 {
		t.Fatalf("replay TASKS.1 = %d %s", code, body)
	}
	e.waitPublished(t, n+1)
	if code, body := do(t, "POST", base+"/TASKS.2:discard", key, `{"reason":"obsolete"}`); code != 200 || !strings.Contains(body, `"discarded"`) {
		t.Errorf("discard TASKS.2 = %d %s", code, body)
	}
	en, err := e.st.GetMeta(ctx, "TASKS.2")
	if err != nil {
		t.Fatal(err)
	}
	last := en.History[len(en.History)-1]
	if last.By != "tenant-api:acme:key-"+keyID || !strings.Contains(last.Note, "obsolete") {
		t.Errorf("discard history = %+v, want by the key, with the reason", last)
	}
	// A second discard is a conflict, not a success.
	if code, body := do(t, "POST", base+"/TASKS.2:discard", key, `{"reason":"again"}`); code != http.StatusConflict {
		t.Errorf("discard again = %d %s, want 409", code, body)
	}
	// Revocation is effective on the next request.
	if err := e.st.RevokeTenantKey(ctx, "acme", keyID, "test"); err != nil {
		t.Fatal(err)
	}
	if code, _ := do(t, "GET", base, key, ""); code != 401 {
		t.Errorf("list after revoke = %d, want 401", code)
	}
}

// apiPage is one page of the list route's answer (the document's
// EntryPage, as much of it as the tests read).
type apiPage struct {
	Entries []struct {
		ID     string `json:"id"`
		Tenant string `json:"tenant"`
	} `json:"entries"`
	Next string `json:"next_page_token"`
}

// listPage gets the page of url (which has its query already) at token tok
// with key, and requires a 200.
func listPage(t *testing.T, url, key, tok string) apiPage {
	t.Helper()
	code, body := do(t, "GET", url+"&page_token="+tok, key, "")
	var p apiPage
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil {
		t.Fatalf("GET %s&page_token=%s = %d %s, want 200", url, tok, code, body)
	}
	return p
}
