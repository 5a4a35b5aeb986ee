package auth

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/config"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	replayURL = "http://127.0.0.1:1/Replay" // only an audience here
	tasksSA   = "tasks@p.iam.gserviceaccount.com"
)

func TestEmulatorMode(t *testing.T) {
	ct := testenv.NewCloudTasks(t)
	queue := ct.Queue(t, "p", testenv.Name(t, "q"))
	// Genuine tokens the emulator mints on dispatch, for each audience and account.
	tokens := map[string]string{
		"good":          testenv.MintToken(t, ct.Client, queue, tasksSA, replayURL),
		"other-aud":     testenv.MintToken(t, ct.Client, queue, tasksSA, "http://127.0.0.1:1/Reconcile"),
		"other-account": testenv.MintToken(t, ct.Client, queue, "intruder@p.iam.gserviceaccount.com", replayURL),
	}
	a, err := New(config.Auth{Mode: config.AuthEmulator, Audience: replayURL, AllowedEmails: []string{tasksSA}}, ct.Host)
	if err != nil {
		t.Fatal(err)
	}
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := FromContext(r.Context())
		io.WriteString(w, id.Email)
	}))
	good := strings.TrimPrefix(tokens["good"], "Bearer ")
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"email":"`+tasksSA+`","email_verified":true,"aud":"`+replayURL+`","iss":"https://accounts.google.com","exp":9999999999}`)) + "." + parts[2]
	tests := []struct {
		name, header string
		want         int
	}{
		{"genuine", tokens["good"], http.StatusOK},
		{"no token", "", http.StatusUnauthorized},
		{"not bearer", "Basic dXNlcjpwdw==", http.StatusUnauthorized},
		{"garbled", "Bearer not.a.jwt", http.StatusUnauthorized},
		{"tampered claims", "Bearer " + tampered, http.StatusUnauthorized},
		{"forged key", "Bearer " + testenv.SignJWT(t, newKey(t), "k1", goodClaims()), http.StatusUnauthorized},
		{"other audience", tokens["other-aud"], http.StatusForbidden},
		{"other account", tokens["other-account"], http.StatusForbidden},
	}
	for _, tc := range tests {
		req := httptest.NewRequest(http.MethodPost, "/Replay", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s: status = %d %q, want %d", tc.name, rec.Code, rec.Body, tc.want)
		}
		if tc.want == http.StatusOK && rec.Body.String() != tasksSA {
			t.Errorf("%s: identity = %q, want %q", tc.name, rec.Body, tasksSA)
		}
	}

	// The same genuine token two hours later has expired.
	late, err := New(config.Auth{Mode: config.AuthEmulator, Audience: replayURL, AllowedEmails: []string{tasksSA}}, ct.Host,
		WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/Replay", nil)
	req.Header.Set("Authorization", tokens["good"])
	if _, err := late.Authenticate(req); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Authenticate(expired) = %v, want ErrUnauthenticated", err)
	}
}

func TestEmulatorModeJWKSDown(t *testing.T) {
	a, err := New(config.Auth{Mode: config.AuthEmulator, Audience: replayURL, AllowedEmails: []string{tasksSA}}, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/Replay", nil)
	req.Header.Set("Authorization", "Bearer "+testenv.SignJWT(t, newKey(t), "k1", goodClaims()))
	rec := httptest.NewRecorder()
	a.Middleware(http.NotFoundHandler()).ServeHTTP(rec, req)
	// Cloud Tasks retries a 503; the token was never judged.
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status with the JWKS unreachable = %d, want 503", rec.Code)
	}
}

// In oidc mode Google's own validator (google.golang.org/api/idtoken) checks
// signature and expiry; its certificate download is answered here with a
// local key, so the checks run for real without the network.
func TestOIDCMode(t *testing.T) {
	key := newKey(t)
	certs := jwks(key, "google-kid")
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != "www.googleapis.com" {
			return nil, errors.New("unexpected host " + r.URL.Host)
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(certs)), Request: r}, nil
	})}
	a, err := New(config.Auth{Mode: config.AuthOIDC, Audience: replayURL, AllowedEmails: []string{tasksSA}}, "", WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(jwt.MapClaims)) jwt.MapClaims { c := goodClaims(); f(c); return c }
	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"genuine", testenv.SignJWT(t, key, "google-kid", goodClaims()), nil},
		{"issuer without scheme", testenv.SignJWT(t, key, "google-kid", mod(func(c jwt.MapClaims) { c["iss"] = "accounts.google.com" })), nil},
		{"expired", testenv.SignJWT(t, key, "google-kid", mod(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), ErrUnauthenticated},
		{"wrong issuer", testenv.SignJWT(t, key, "google-kid", mod(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })), ErrUnauthenticated},
		{"other key", testenv.SignJWT(t, newKey(t), "google-kid", goodClaims()), ErrUnauthenticated},
		{"unknown kid", testenv.SignJWT(t, key, "nope", goodClaims()), ErrUnauthenticated},
		{"wrong audience", testenv.SignJWT(t, key, "google-kid", mod(func(c jwt.MapClaims) { c["aud"] = "https://elsewhere" })), ErrForbidden},
		{"wrong account", testenv.SignJWT(t, key, "google-kid", mod(func(c jwt.MapClaims) { c["email"] = "x@p.iam.gserviceaccount.com" })), ErrForbidden},
		{"email not verified", testenv.SignJWT(t, key, "google-kid", mod(func(c jwt.MapClaims) { c["email_verified"] = false })), ErrForbidden},
		{"alg none", unsigned(goodClaims()), ErrUnauthenticated},
	}
	for _, tc := range tests {
		req := httptest.NewRequest(http.MethodPost, "/Replay", nil)
		req.Header.Set("Authorization", "Bearer "+tc.token)
		_, err := a.Authenticate(req)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: Authenticate() = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestNoneModeAndBadConfig(t *testing.T) {
	a, err := New(config.Auth{Mode: config.AuthNone}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(httptest.NewRequest(http.MethodPost, "/", nil)); err != nil {
		t.Errorf("none mode Authenticate() = %v, want nil", err)
	}
	if _, err := New(config.Auth{Mode: config.AuthOIDC}, ""); err == nil {
		t.Errorf("New(oidc without audience) = nil, want an error")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func goodClaims() jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": "https://accounts.google.com", "aud": replayURL, "email": tasksSA, "email_verified": true,
		"sub": "1", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

func unsigned(c jwt.MapClaims) string {
	h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT"})
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(b) + "."
}

func jwks(key *rsa.PrivateKey, kid string) string {
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
		"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
	}}})
	return string(b)
}

// Anyone can send a request: a refusal logs its path through the log
// encoder, so a path of control or bidirectional characters (escaped in
// the URL) reaches no log line raw.
func TestRefusalLogsThePathEscaped(t *testing.T) {
	log, logs := testenv.Logger()
	a, err := New(config.Auth{Mode: config.AuthEmulator, Audience: replayURL, AllowedEmails: []string{tasksSA}}, "127.0.0.1:1", WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	h := a.Middleware(http.NotFoundHandler())
	for _, n := range testenv.HostileNames() {
		req := httptest.NewRequest(http.MethodPost, "/Replay/"+url.PathEscape(n.Value), nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("%s: status = %d, want 401", n.Name, rec.Code)
		}
	}
	if got := len(logs.Lines("request refused")); got != len(testenv.HostileNames()) {
		t.Errorf("%d refusals logged, want %d", got, len(testenv.HostileNames()))
	}
	logs.CheckVisibleLines(t, "auth refusals")
}
