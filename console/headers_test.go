package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Every answer carries the console's security headers (no framing, no
// sniffing, no script, no referrer, no caching), whatever its status: a
// page, the API's document, a refusal and an unknown route; and the CSRF
// cookie is Secure exactly when WithSecureCookies says so (on Google
// Cloud), HttpOnly and SameSite=Strict always.
func TestSecurityHeadersAndCookie(t *testing.T) {
	fs, _ := testenv.Firestore(t)
	st := store.New(fs)
	want := map[string]string{
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Referrer-Policy":         "no-referrer",
		"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		"Cache-Control":           "no-store",
	}
	for _, secure := range []bool{false, true} {
		srv := httptest.NewServer(console.New(st, nil, console.LocalAuth("ops@example.com"), console.WithSecureCookies(secure)).Handler())
		for _, path := range []string{"/entries", "/healthz", "/api/v1/openapi.json", "/api/v1/tenants/acme/entries", "/no-such-page", "/entries/%ff"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			for k, v := range want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("GET %s (status %d): header %s = %q, want %q", path, resp.StatusCode, k, got, v)
				}
			}
			if path != "/entries" {
				continue
			}
			var csrf *http.Cookie
			for _, c := range resp.Cookies() {
				if c.Name == "jsdlq_csrf" {
					csrf = c
				}
			}
			if csrf == nil {
				t.Fatalf("GET /entries (status %d) set no cookie, want the CSRF cookie", resp.StatusCode)
			}
			if csrf.Secure != secure || !csrf.HttpOnly || csrf.SameSite != http.SameSiteStrictMode {
				t.Errorf("WithSecureCookies(%v): CSRF cookie %+v, want Secure %v, HttpOnly, SameSite=Strict", secure, csrf, secure)
			}
		}
		srv.Close()
	}
}
