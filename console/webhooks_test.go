package console_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/secrettest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// A tenant manages its own webhooks with its key: the secret is answered
// once, when the endpoint is added, and never listed; URLs jsdlq must not
// call, forged and revoked keys, another tenant's path or endpoint are
// refused with the documented JSON error and change nothing.
func TestTenantAPIWebhooks(t *testing.T) {
	box, _ := secrettest.Box(t)
	e := newEnv(t, nil, console.WithWebhookGuard(webhook.NewGuard(webhook.WithOwnURLs("https://jsdlq-api.example.com"))), console.WithSecrets(box))
	ctx := testenv.Context(t)
	acmeKey, globexKey, revoked := e.apiKeys(t)
	base := e.srv.URL + "/api/v1/tenants/"

	code, body := do(t, "POST", base+"acme/webhooks", acmeKey, `{"url":"https://hooks.acme.example/jsdlq"}`)
	var added struct {
		Webhook struct {
			ID            string `json:"id"`
			CreatedByRole string `json:"created_by_role"`
		} `json:"webhook"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(body), &added); code != 201 || err != nil || !strings.HasPrefix(added.Secret, "whsec_") || added.Webhook.CreatedByRole != "tenant" {
		t.Fatalf("POST acme/webhooks = %d %s, want 201 with the secret, added by the tenant", code, body)
	}
	stored, err := e.st.GetWebhook(ctx, "acme", added.Webhook.ID)
	if err != nil || stored.Secret != "" || strings.Contains(string(stored.SealedSecret), added.Secret[6:]) || !strings.HasPrefix(stored.CreatedBy, "tenant-api:acme:key-") {
		t.Fatalf("stored webhook = %+v, %v, want the secret sealed, added by acme's key", stored, err)
	}
	if sec, _, err := hooksecret.Open(ctx, box, stored); err != nil || sec.Reveal() != added.Secret {
		t.Fatalf("the stored secret opens to %v, want the answered one", err)
	}
	globexHook, _, err := hooksecret.Create(ctx, e.st, box, "globex", "https://hooks.globex.example/", "test")
	if err != nil {
		t.Fatal(err)
	}

	list := func(key, tenant string) []string {
		t.Helper()
		code, body := do(t, "GET", base+tenant+"/webhooks", key, "")
		if strings.Contains(body, "whsec_") {
			t.Errorf("GET %s/webhooks shows a secret: %s", tenant, body)
		}
		var out struct {
			Webhooks []struct{ ID, URL string } `json:"webhooks"`
		}
		if err := json.Unmarshal([]byte(body), &out); code != 200 || err != nil {
			t.Fatalf("GET %s/webhooks = %d %s", tenant, code, body)
		}
		var ids []string
		for _, w := range out.Webhooks {
			ids = append(ids, w.ID+" "+w.URL)
		}
		return ids
	}
	wantAcme := []string{added.Webhook.ID + " https://hooks.acme.example/jsdlq"}
	if d := cmp.Diff(wantAcme, list(acmeKey, "acme")); d != "" {
		t.Errorf("acme's webhooks (-want +got):\n%s", d)
	}

	for _, tt := range []struct {
		name, method, path, key, body string
		want                          int
		code                          string
	}{
		{"no key", "GET", "acme/webhooks", "", "", 401, "unauthenticated"},
		{"forged key", "POST", "acme/webhooks", acmeKey[:len(acmeKey)-2] + "zz", `{"url":"https://x.example/"}`, 401, "unauthenticated"},
		{"revoked key", "POST", "acme/webhooks", revoked, `{"url":"https://x.example/"}`, 401, "unauthenticated"},
		{"another tenant's path", "GET", "globex/webhooks", acmeKey, "", 404, "not_found"},
		{"add to another tenant", "POST", "globex/webhooks", acmeKey, `{"url":"https://x.example/"}`, 404, "not_found"},
		{"remove another tenant's webhook", "DELETE", "acme/webhooks/" + globexHook.ID, acmeKey, "", 404, "not_found"},
		{"remove through another tenant's path", "DELETE", "globex/webhooks/" + globexHook.ID, acmeKey, "", 404, "not_found"},
		{"remove a malformed id", "DELETE", "acme/webhooks/..%2Ftenant-keys", acmeKey, "", 404, "not_found"},
		{"no body", "POST", "acme/webhooks", acmeKey, "", 400, "invalid_argument"},
		{"unknown field", "POST", "acme/webhooks", acmeKey, `{"url":"https://x.example/","secret":"whsec_mine"}`, 400, "invalid_argument"},
		{"relative URL", "POST", "acme/webhooks", acmeKey, `{"url":"/hook"}`, 400, "invalid_argument"},
		{"malformed URL", "POST", "acme/webhooks", acmeKey, `{"url":"https://exa mple.com/"}`, 400, "invalid_argument"},
		{"http", "POST", "acme/webhooks", acmeKey, `{"url":"http://hooks.acme.example/"}`, 400, "invalid_argument"},
		{"loopback", "POST", "acme/webhooks", acmeKey, `{"url":"https://127.0.0.1:8443/"}`, 400, "invalid_argument"},
		{"localhost", "POST", "acme/webhooks", acmeKey, `{"url":"https://localhost/"}`, 400, "invalid_argument"},
		{"private", "POST", "acme/webhooks", acmeKey, `{"url":"https://192.168.1.10/"}`, 400, "invalid_argument"},
		{"metadata server", "POST", "acme/webhooks", acmeKey, `{"url":"https://169.254.169.254/computeMetadata/v1/"}`, 400, "invalid_argument"},
		{"jsdlq itself", "POST", "acme/webhooks", acmeKey, `{"url":"https://jsdlq-api.example.com/api/v1/tenants/acme/entries"}`, 400, "invalid_argument"},
		{"jsdlq itself, port spelt with zeros", "POST", "acme/webhooks", acmeKey, `{"url":"https://jsdlq-api.example.com:0443/x"}`, 400, "invalid_argument"},
		// Within the limit as sent, beyond it once encoded (the store took
		// it as a 500).
		{"URL too long once encoded", "POST", "acme/webhooks", acmeKey, `{"url":"https://hooks.acme.example/` + strings.Repeat("é", 1000) + `"}`, 400, "invalid_argument"},
		{"NAT64 of the metadata server", "POST", "acme/webhooks", acmeKey, `{"url":"https://[64:ff9b::a9fe:a9fe]/"}`, 400, "invalid_argument"},
		{"duplicate", "POST", "acme/webhooks", acmeKey, `{"url":"https://hooks.acme.example/jsdlq"}`, 409, "failed_precondition"},
	} {
		code, body := do(t, tt.method, base+tt.path, tt.key, tt.body)
		var ae struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &ae); code != tt.want || err != nil || ae.Error.Code != tt.code {
			t.Errorf("%s: %s %s = %d %s, want %d %s", tt.name, tt.method, tt.path, code, body, tt.want, tt.code)
		}
	}
	if d := cmp.Diff(wantAcme, list(acmeKey, "acme")); d != "" {
		t.Errorf("acme's webhooks after the refusals (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{globexHook.ID + " https://hooks.globex.example/"}, list(globexKey, "globex")); d != "" {
		t.Errorf("globex's webhooks after the refusals (-want +got):\n%s", d)
	}

	code, body = do(t, "DELETE", base+"acme/webhooks/"+added.Webhook.ID, acmeKey, "")
	if code != 200 || !strings.Contains(body, added.Webhook.ID) {
		t.Errorf("DELETE acme's webhook = %d %s, want 200", code, body)
	}
	if got := list(acmeKey, "acme"); len(got) != 0 {
		t.Errorf("acme's webhooks after the removal = %v, want none", got)
	}
	if code, _ := do(t, "DELETE", base+"acme/webhooks/"+added.Webhook.ID, acmeKey, ""); code != 404 {
		t.Errorf("DELETE again = %d, want 404", code)
	}
}

// Without a key to seal secrets nothing is added: a secret is never
// stored in clear (503, and no endpoint).
func TestTenantAPIWebhooksNeedASealingKey(t *testing.T) {
	e := newEnv(t, nil)
	ctx := testenv.Context(t)
	acmeKey, _, _ := e.apiKeys(t)
	code, body := do(t, "POST", e.srv.URL+"/api/v1/tenants/acme/webhooks", acmeKey, `{"url":"https://hooks.acme.example/jsdlq"}`)
	if code != 503 || !strings.Contains(body, "unavailable") {
		t.Errorf("POST acme/webhooks without a sealing key = %d %s, want 503 unavailable", code, body)
	}
	if hooks, err := e.st.ListWebhooks(ctx, "acme"); err != nil || len(hooks) != 0 {
		t.Errorf("acme's webhooks = %v, %v, want none", hooks, err)
	}
}
