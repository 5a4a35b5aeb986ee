// Package keyset verifies Google-style RS256 ID tokens against the keys a JWKS
// document publishes, and holds the types of both. shared/auth's
// AUTH_MODE=emulator (and the console's CONSOLE_TRIAGE_AUTH=emulator)
// verifies the tokens the local Cloud Tasks emulator signs with it; the
// emulator signs and publishes with its types. It is token verification with
// nothing of the emulator in it, so a binary that runs both locally and
// deployed links it and never the emulator. A leaf: it imports nothing of the
// module.
package keyset

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// GoogleIssuer is the issuer Google writes into the ID tokens Cloud Tasks and
// Cloud Scheduler send; the local emulator signs its tokens as Google.
const GoogleIssuer = "https://accounts.google.com"

// ErrToken is wrapped by every error about the token itself (signature,
// issuer, audience, expiry, unknown key); other errors are about fetching
// the keys, worth a retry.
var ErrToken = errors.New("keyset: invalid token")

// IDTokenClaims are the claims of a Google-style OIDC ID token, the set
// Cloud Tasks puts into its tokens (and the local emulator into its own).
type IDTokenClaims struct {
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
	jwt.RegisteredClaims
}

// JWK is one RSA public key of a JWKS document (RFC 7517).
type JWK struct {
	Kty string `json:"kty"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// JWKSet is a JWKS document: what a token issuer publishes and a
// Verifier reads.
type JWKSet struct {
	Keys []JWK `json:"keys"`
}

// Verifier checks ID tokens against the keys of one JWKS document. Keys
// are fetched lazily and refetched when a token names an unknown kid (the
// issuer rotated its key, or the local emulator restarted without
// --data-dir).
type Verifier struct {
	url    string
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	keys    map[string]*rsa.PublicKey
	fetched time.Time
}

// refetchAfter bounds how often tokens naming unknown key ids (forged, or
// from an emulator run without --data-dir that has since restarted) can make
// the verifier fetch the JWKS again.
const refetchAfter = 5 * time.Second

// VerifierOption configures NewVerifier.
type VerifierOption func(*Verifier)

// WithVerifierHTTPClient sets the client fetching the JWKS.
func WithVerifierHTTPClient(c *http.Client) VerifierOption {
	return func(v *Verifier) { v.client = c }
}

// WithVerifierClock sets the time used to check exp/iat.
func WithVerifierClock(now func() time.Time) VerifierOption {
	return func(v *Verifier) { v.now = now }
}

// NewVerifier returns a Verifier for the JWKS at jwksURL (the local
// emulator's is clientopt.CloudTasksJWKSURL).
func NewVerifier(jwksURL string, opts ...VerifierOption) *Verifier {
	v := &Verifier{url: jwksURL, client: &http.Client{Timeout: 10 * time.Second}, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	return v
}

// Verify checks the signature, issuer (Google's), audience, expiry and
// email_verified of raw (without the "Bearer " prefix) and returns its
// claims. A bad token's error wraps ErrToken.
func (v *Verifier) Verify(ctx context.Context, raw, audience string) (*IDTokenClaims, error) {
	claims := &IDTokenClaims{}
	var fetchErr error
	keyFunc := func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		key, err := v.key(ctx, kid)
		if err != nil {
			fetchErr = err
		}
		return key, err
	}
	_, err := jwt.ParseWithClaims(raw, claims, keyFunc,
		jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg()}),
		jwt.WithIssuer(GoogleIssuer),
		jwt.WithAudience(audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(v.now),
	)
	if fetchErr != nil {
		return nil, fetchErr
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrToken, err)
	}
	if !claims.EmailVerified || claims.Email == "" {
		return nil, fmt.Errorf("%w: email not verified", ErrToken)
	}
	return claims, nil
}

func (v *Verifier) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if k, ok := v.keys[kid]; ok {
		return k, nil
	}
	if v.keys != nil && time.Since(v.fetched) < refetchAfter {
		return nil, fmt.Errorf("%w: unknown key id %q", ErrToken, kid)
	}
	keys, err := v.fetch(ctx)
	if err != nil {
		return nil, err
	}
	v.keys, v.fetched = keys, time.Now()
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w: unknown key id %q", ErrToken, kid)
}

func (v *Verifier) fetch(ctx context.Context) (map[string]*rsa.PublicKey, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.url, nil)
	if err != nil {
		return nil, fmt.Errorf("keyset: fetch jwks %s: %w", v.url, err)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("keyset: fetch jwks %s: %w", v.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("keyset: fetch jwks %s: HTTP %d", v.url, resp.StatusCode)
	}
	var set JWKSet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("keyset: decode jwks %s: %w", v.url, err)
	}
	keys := make(map[string]*rsa.PublicKey, len(set.Keys))
	for _, k := range set.Keys {
		if k.Kty != "RSA" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("keyset: jwks %s: malformed key %q", v.url, k.Kid)
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	return keys, nil
}
