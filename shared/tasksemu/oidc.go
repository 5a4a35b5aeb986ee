package tasksemu

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// OIDC tokens the emulator attaches to tasks with an oidc_token. The issuer
// is Google's so verifiers written for real Cloud Tasks tokens accept them
// unchanged once pointed at the emulator's JWKS.
const (
	Issuer   = "https://accounts.google.com"
	JWKSPath = "/jwks.json"
)

// ErrToken is wrapped by every token verification failure.
var ErrToken = errors.New("tasksemu: invalid token")

// JWKSURL returns the JWKS address the emulator serves by default for a
// gRPC listener on grpcHostPort: same host, port+1, path JWKSPath; e.g.
// 127.0.0.1:8123 gives http://127.0.0.1:8124/jwks.json.
func JWKSURL(grpcHostPort string) (string, error) {
	hp, err := DefaultJWKSHostPort(grpcHostPort)
	if err != nil {
		return "", err
	}
	return "http://" + hp + JWKSPath, nil
}

// DefaultJWKSHostPort is the JWKS listener address paired with a gRPC
// address: the next port on the same host.
func DefaultJWKSHostPort(grpcHostPort string) (string, error) {
	host, port, err := net.SplitHostPort(grpcHostPort)
	if err != nil {
		return "", fmt.Errorf("tasksemu: host-port %q: %w", grpcHostPort, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p >= 65535 {
		return "", fmt.Errorf("tasksemu: host-port %q: bad port", grpcHostPort)
	}
	if p == 0 {
		return net.JoinHostPort(host, "0"), nil
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// IDTokenClaims are the claims of the OIDC tokens the emulator signs, the
// same set Google puts into Cloud Tasks OIDC tokens.
type IDTokenClaims struct {
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
	jwt.RegisteredClaims
}

// JWK is one RSA public key of the emulator's JWKS.
type JWK struct {
	Kty string `json:"kty"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// JWKSet is the JWKS document the emulator serves at JWKSPath.
type JWKSet struct {
	Keys []JWK `json:"keys"`
}

// Verifier checks OIDC tokens issued by the emulator against its JWKS; the
// replay function uses it when AUTH_MODE=emulator. Keys are fetched lazily
// and refetched when a token names an unknown kid (the emulator restarted
// without --data-dir).
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

// NewVerifier returns a Verifier for the JWKS at jwksURL (see JWKSURL).
func NewVerifier(jwksURL string, opts ...VerifierOption) *Verifier {
	v := &Verifier{url: jwksURL, client: &http.Client{Timeout: 10 * time.Second}, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	return v
}

// Verify checks the signature, issuer, audience, expiry and email_verified
// of raw (without the "Bearer " prefix) and returns its claims.
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
		jwt.WithIssuer(Issuer),
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
		return nil, fmt.Errorf("tasksemu: fetch jwks %s: %w", v.url, err)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("tasksemu: fetch jwks %s: %w", v.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("tasksemu: fetch jwks %s: HTTP %d", v.url, resp.StatusCode)
	}
	var set JWKSet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("tasksemu: decode jwks %s: %w", v.url, err)
	}
	keys := make(map[string]*rsa.PublicKey, len(set.Keys))
	for _, k := range set.Keys {
		if k.Kty != "RSA" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("tasksemu: jwks %s: malformed key %q", v.url, k.Kid)
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	return keys, nil
}
