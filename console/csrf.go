package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
)

// CSRF protection of the operator UI: a double-submit token. The first page
// sets a random token in a SameSite=Strict, HttpOnly cookie; every form
// carries the same token in a hidden field; a state-changing request whose
// field does not equal its cookie is refused (403). A page of another site
// can make the browser send the cookie but cannot read it, so it cannot
// fill in the field. http.CrossOriginProtection in front refuses
// cross-origin POSTs by their Sec-Fetch-Site and Origin headers as well.

const (
	csrfCookie = "jsdlq_csrf"
	csrfField  = "csrf"
)

// csrfToken returns the request's token, setting a new cookie when it has
// none (or a malformed one).
func (s *Server) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && validToken(c.Value) {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	tok := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/", HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
	return tok
}

func validToken(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == 32
}

// checkCSRF reports whether a state-changing request carries its cookie's
// token in the form.
func checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || !validToken(c.Value) {
		return false
	}
	f := r.PostFormValue(csrfField)
	return subtle.ConstantTimeCompare([]byte(f), []byte(c.Value)) == 1
}
