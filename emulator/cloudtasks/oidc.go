package cloudtasks

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// OIDC tokens the emulator attaches to tasks with an oidc_token. The issuer
// is Google's so verifiers written for real Cloud Tasks tokens accept them
// unchanged once pointed at the emulator's JWKS.
const (
	Issuer        = "https://accounts.google.com"
	JWKSPath      = "/jwks.json"
	tokenLifetime = time.Hour
	keyFile       = "oidc-key.pem"
)

// ErrToken is wrapped by every token verification failure.
var ErrToken = errors.New("cloudtasks: invalid token")

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
		return "", fmt.Errorf("cloudtasks: host-port %q: %w", grpcHostPort, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p >= 65535 {
		return "", fmt.Errorf("cloudtasks: host-port %q: bad port", grpcHostPort)
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

type signer struct {
	key *rsa.PrivateKey
	kid string
}

// loadOrCreateSigner reads the RSA key from dir, or generates one (and
// stores it in dir when dir is set) so tokens stay verifiable across restarts.
func loadOrCreateSigner(dir string) (*signer, error) {
	if dir != "" {
		data, err := os.ReadFile(filepath.Join(dir, keyFile))
		switch {
		case err == nil:
			block, _ := pem.Decode(data)
			if block == nil {
				return nil, fmt.Errorf("cloudtasks: %s: no PEM block", keyFile)
			}
			key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("cloudtasks: parse %s: %w", keyFile, err)
			}
			return newSigner(key), nil
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("cloudtasks: read %s: %w", keyFile, err)
		}
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("cloudtasks: generate key: %w", err)
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cloudtasks: create data dir: %w", err)
		}
		data := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
		tmp := filepath.Join(dir, keyFile+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return nil, fmt.Errorf("cloudtasks: write key: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, keyFile)); err != nil {
			return nil, fmt.Errorf("cloudtasks: write key: %w", err)
		}
		if err := syncDir(dir); err != nil {
			return nil, fmt.Errorf("cloudtasks: write key: %w", err)
		}
	}
	return newSigner(key), nil
}

func newSigner(key *rsa.PrivateKey) *signer {
	sum := sha256.Sum256(x509.MarshalPKCS1PublicKey(&key.PublicKey))
	return &signer{key: key, kid: base64.RawURLEncoding.EncodeToString(sum[:12])}
}

func (s *signer) idToken(email, audience string, now time.Time) (string, error) {
	claims := IDTokenClaims{
		Email:         email,
		EmailVerified: true,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    Issuer,
			Subject:   subjectFor(email),
			Audience:  jwt.ClaimStrings{audience},
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(tokenLifetime)),
		},
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = s.kid
	signed, err := tok.SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("cloudtasks: sign token: %w", err)
	}
	return signed, nil
}

// subjectFor gives a stable numeric subject per service account, as Google
// uses the account's unique id.
func subjectFor(email string) string {
	sum := sha256.Sum256([]byte(email))
	return new(big.Int).SetBytes(sum[:9]).String()
}

type jwk struct {
	Kty string `json:"kty"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

type jwkSet struct {
	Keys []jwk `json:"keys"`
}

func (s *signer) jwks() jwkSet {
	pub := s.key.PublicKey
	return jwkSet{Keys: []jwk{{
		Kty: "RSA", Alg: "RS256", Use: "sig", Kid: s.kid,
		N: base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}}
}

// httpHandler serves the JWKS and a health probe for stack scripts.
func (s *signer) httpHandler() http.Handler {
	body, _ := json.Marshal(s.jwks())
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+JWKSPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
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
		return nil, fmt.Errorf("cloudtasks: fetch jwks %s: %w", v.url, err)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cloudtasks: fetch jwks %s: %w", v.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cloudtasks: fetch jwks %s: HTTP %d", v.url, resp.StatusCode)
	}
	var set jwkSet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("cloudtasks: decode jwks %s: %w", v.url, err)
	}
	keys := make(map[string]*rsa.PublicKey, len(set.Keys))
	for _, k := range set.Keys {
		if k.Kty != "RSA" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("cloudtasks: jwks %s: malformed key %q", v.url, k.Kid)
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	return keys, nil
}
