package console

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jsdlq/jsdlq/shared/authority"
)

// This file authenticates operators. On Google Cloud the console sits
// behind IAP, which signs every request it lets through with an ES256 JWT
// in x-goog-iap-jwt-assertion; the console verifies it in code as well, so
// a request that reached the service some other way (a misconfigured
// ingress, a direct call) carries no identity. The verified identity gets
// its role from roles.go. Locally an explicit mode names the operator and
// its role (CONSOLE_AUTH=local, refused on Cloud Run).

// IAP's constants.
const (
	IAPHeader  = "x-goog-iap-jwt-assertion"
	IAPIssuer  = "https://cloud.google.com/iap"
	IAPKeysURL = "https://www.gstatic.com/iap/verify/public_key-jwk"
)

// Errors of operator authentication.
var (
	ErrUnauthenticated = errors.New("console: unauthenticated")
	ErrKeysUnavailable = errors.New("console: IAP keys unavailable")
)

// Authenticator names the operator behind a request and the role they act
// in (RoleAuth behind IAP). An error wrapping ErrUnauthenticated is a 401,
// ErrNoRole a 403, ErrKeysUnavailable a 503.
type Authenticator interface {
	Operator(r *http.Request) (authority.Actor, error)
}

// LocalAuth is a local operator with the approver role: every request acts
// as it (LocalActor names another role).
type LocalAuth string

// Operator returns the operator, as an approver.
func (l LocalAuth) Operator(*http.Request) (authority.Actor, error) {
	return authority.Actor{Name: string(l), Role: authority.Approver}, nil
}

// LocalActor is the local stack's operator and role (CONSOLE_OPERATOR,
// CONSOLE_ROLE): every request acts as it.
type LocalActor authority.Actor

// Operator returns the configured actor.
func (l LocalActor) Operator(*http.Request) (authority.Actor, error) { return authority.Actor(l), nil }

// KeySource returns IAP's public key of a key id.
type KeySource interface {
	Key(ctx context.Context, kid string) (*ecdsa.PublicKey, error)
}

// IAPAuth verifies IAP's signed header.
type IAPAuth struct {
	audience string
	keys     KeySource
	now      func() time.Time
}

// NewIAPAuth returns an authenticator for audience over keys (JWKSKeys in
// production, a test's own keys in tests). now may be nil (time.Now).
func NewIAPAuth(audience string, keys KeySource, now func() time.Time) *IAPAuth {
	if now == nil {
		now = time.Now
	}
	return &IAPAuth{audience: audience, keys: keys, now: now}
}

type iapClaims struct {
	Email string `json:"email"`
	// HD is the account's Google Workspace or Cloud Identity domain.
	HD string `json:"hd"`
	jwt.RegisteredClaims
}

// Identity verifies the assertion (ES256, issuer IAP, this audience,
// current) and returns the account it names.
func (a *IAPAuth) Identity(r *http.Request) (Identity, error) {
	raw := r.Header.Get(IAPHeader)
	if raw == "" {
		return Identity{}, fmt.Errorf("%w: no %s header", ErrUnauthenticated, IAPHeader)
	}
	var c iapClaims
	_, err := jwt.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, fmt.Errorf("%w: no key id", ErrUnauthenticated)
		}
		return a.keys.Key(r.Context(), kid)
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodES256.Alg()}),
		jwt.WithIssuer(IAPIssuer),
		jwt.WithAudience(a.audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(30*time.Second),
		jwt.WithTimeFunc(a.now),
	)
	if err != nil {
		if errors.Is(err, ErrKeysUnavailable) {
			return Identity{}, err
		}
		return Identity{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if c.Email == "" || c.Subject == "" {
		return Identity{}, fmt.Errorf("%w: assertion names no account", ErrUnauthenticated)
	}
	// IAP prefixes the email with its identity source.
	return Identity{Email: strings.TrimPrefix(c.Email, "accounts.google.com:"), Domain: c.HD}, nil
}

// JWKSKeys fetches IAP's keys (a JWK set) and caches them for an hour; an
// unknown key id refetches, at most once a minute, so a rotated key is
// found and a forged key id cannot make the console hammer the endpoint.
type JWKSKeys struct {
	url    string
	client *http.Client

	mu      sync.Mutex
	keys    map[string]*ecdsa.PublicKey
	fetched time.Time
	tried   time.Time
}

// NewJWKSKeys returns the key source of url (IAPKeysURL in production).
func NewJWKSKeys(url string, client *http.Client) *JWKSKeys {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &JWKSKeys{url: url, client: client}
}

// Key returns the key of kid.
func (j *JWKSKeys) Key(ctx context.Context, kid string) (*ecdsa.PublicKey, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if k, ok := j.keys[kid]; ok && time.Since(j.fetched) < time.Hour {
		return k, nil
	}
	if time.Since(j.tried) < time.Minute && j.keys != nil {
		if k, ok := j.keys[kid]; ok {
			return k, nil
		}
		return nil, fmt.Errorf("%w: unknown key id %q", ErrUnauthenticated, kid)
	}
	j.tried = time.Now()
	keys, err := fetchJWKS(ctx, j.client, j.url)
	if err != nil {
		if k, ok := j.keys[kid]; ok {
			return k, nil // a stale key beats no console while gstatic is away
		}
		return nil, fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
	}
	j.keys, j.fetched = keys, time.Now()
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w: unknown key id %q", ErrUnauthenticated, kid)
}

func fetchJWKS(ctx context.Context, client *http.Client, url string) (map[string]*ecdsa.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s", url, resp.Status)
	}
	var set struct {
		Keys []JWK `json:"keys"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("decode %s: %w", url, err)
	}
	keys := map[string]*ecdsa.PublicKey{}
	for _, k := range set.Keys {
		pk, err := k.PublicKey()
		if err != nil {
			continue // a key of another kind is not IAP's ES256 key
		}
		keys[k.Kid] = pk
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no P-256 key", url)
	}
	return keys, nil
}

// JWK is one key of a JWK set (the EC fields).
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	Kid string `json:"kid"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// PublicKey returns the P-256 key, checked to be on the curve.
func (k JWK) PublicKey() (*ecdsa.PublicKey, error) {
	if k.Kty != "EC" || k.Crv != "P-256" {
		return nil, fmt.Errorf("key %q is %s/%s, not EC/P-256", k.Kid, k.Kty, k.Crv)
	}
	x, err1 := base64.RawURLEncoding.DecodeString(k.X)
	y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
	if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
		return nil, fmt.Errorf("key %q: bad coordinates", k.Kid)
	}
	// The uncompressed point 04||X||Y; parsing checks it is on the curve.
	pk, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", k.Kid, err)
	}
	return pk, nil
}

// NewJWK describes a public key as a JWK (tests serve their own key set).
func NewJWK(kid string, pk *ecdsa.PublicKey) JWK {
	b, err := pk.Bytes() // 04||X||Y for a valid P-256 key
	if err != nil || len(b) != 65 {
		return JWK{Kty: "EC", Crv: "P-256", Kid: kid}
	}
	return JWK{Kty: "EC", Crv: "P-256", Kid: kid,
		X: base64.RawURLEncoding.EncodeToString(b[1:33]),
		Y: base64.RawURLEncoding.EncodeToString(b[33:])}
}
