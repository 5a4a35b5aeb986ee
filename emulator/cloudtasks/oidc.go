package cloudtasks

import (
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
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jsdlq/jsdlq/shared/auth/keyset"
	"github.com/jsdlq/jsdlq/shared/clientopt"
)

// EnvHost names the variable that points the project's Cloud Tasks clients
// at the emulator; the Go client itself honours no emulator variable.
const EnvHost = "CLOUD_TASKS_EMULATOR_HOST"

// DefaultHostPort is where the emulator listens unless told otherwise.
const DefaultHostPort = "127.0.0.1:8123"

// Lifetime and on-disk name of the signing key's tokens and key.
const (
	tokenLifetime = time.Hour
	keyFile       = "oidc-key.pem"
)

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
	claims := keyset.IDTokenClaims{
		Email:         email,
		EmailVerified: true,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    keyset.GoogleIssuer,
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

func (s *signer) jwks() keyset.JWKSet {
	pub := s.key.PublicKey
	return keyset.JWKSet{Keys: []keyset.JWK{{
		Kty: "RSA", Alg: "RS256", Use: "sig", Kid: s.kid,
		N: base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}}
}

// httpHandler serves the JWKS and a health probe for stack scripts.
func (s *signer) httpHandler() http.Handler {
	body, _ := json.Marshal(s.jwks())
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+clientopt.CloudTasksJWKSPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}
