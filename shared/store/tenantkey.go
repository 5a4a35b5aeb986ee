package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/event"
)

// This file holds the tenant recovery API's keys (docs/console.md, "The tenant
// recovery API"): a key is shown once, when it is made, and only the SHA-256
// of its secret is stored. A plain digest is enough because the secret is 32
// random bytes (no dictionary to try); the comparison is constant-time all the
// same. Every verification reads the key's document, so a revocation holds
// from the next request on: there is no cache to invalidate.

// TenantKeys is the collection of tenant API keys, one document per key id.
const TenantKeys = "tenant-keys"

// ErrUnknownKey is every key that does not let its bearer in: malformed,
// unknown, revoked or not matching its stored digest. The API answers each
// alike (401), so the message says which only to the log.
var ErrUnknownKey = errors.New("store: unknown or revoked tenant key")

// tenantKeyPrefix starts every key, so a leaked key is recognisable (secret
// scanners match on it) and a key of another system is refused at a glance.
const tenantKeyPrefix = "jsdlq_"

const (
	keyIDBytes     = 8  // key id: 16 hex digits, the document id
	keySecretBytes = 32 // secret: base64url, 43 characters
)

// TenantKey is a stored key, without its secret.
type TenantKey struct {
	ID        string    `firestore:"-" json:"id"`
	Tenant    string    `firestore:"tenant" json:"tenant"`
	Hash      string    `firestore:"secret_sha256" json:"-"`
	CreatedAt time.Time `firestore:"created_at" json:"created_at"`
	CreatedBy string    `firestore:"created_by" json:"created_by"`
	Revoked   bool      `firestore:"revoked" json:"revoked"`
	RevokedAt time.Time `firestore:"revoked_at,omitempty" json:"revoked_at,omitzero"`
	RevokedBy string    `firestore:"revoked_by,omitempty" json:"revoked_by,omitempty"`
}

// checkTenant refuses tenant names no key, webhook or entry of the wire
// can be scoped to: empty (it would mean every tenant, store.AllTenants),
// and every name event.ParseTenant refuses (the naming rule).
func checkTenant(tenant string) error {
	if _, err := event.ParseTenant(tenant); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CreateTenantKey makes a key for tenant and returns it (the only time the
// secret exists outside its bearer's hands) with its id. by is who made it.
func (s *Store) CreateTenantKey(ctx context.Context, tenant, by string) (key, id string, err error) {
	if err := checkTenant(tenant); err != nil {
		return "", "", err
	}
	if strings.TrimSpace(by) == "" {
		return "", "", fmt.Errorf("%w: who creates a tenant key must be named", ErrInvalid)
	}
	if id, err = newKeyID(); err != nil {
		return "", "", fmt.Errorf("tenant key id: %w", err)
	}
	secret := make([]byte, keySecretBytes)
	if _, err := rand.Read(secret); err != nil {
		return "", "", fmt.Errorf("tenant key secret: %w", err)
	}
	sec := base64.RawURLEncoding.EncodeToString(secret)
	k := TenantKey{Tenant: tenant, Hash: digest(sec), CreatedAt: s.Now(), CreatedBy: by}
	// Create, not Set: a (vanishingly unlikely) id collision fails instead
	// of replacing another tenant's key.
	_, err = s.fs.Collection(TenantKeys).Doc(id).Create(ctx, k)
	s.wrote(1)
	if err != nil {
		return "", "", fmt.Errorf("firestore create %s/%s: %w", TenantKeys, id, err)
	}
	return tenantKeyPrefix + id + "_" + sec, id, nil
}

// ListTenantKeys returns tenant's keys, revoked ones included, oldest first.
func (s *Store) ListTenantKeys(ctx context.Context, tenant string) ([]TenantKey, error) {
	found, err := tenantDocs(ctx, s, TenantKeys, tenant, decodeTenantKey, func(k *TenantKey) (time.Time, string) { return k.CreatedAt, k.ID })
	if err != nil {
		return nil, err
	}
	keys := make([]TenantKey, 0, len(found))
	for _, k := range found {
		keys = append(keys, *k)
	}
	return keys, nil
}

// RevokeTenantKey revokes one key of tenant. A key of another tenant is
// ErrNotFound, as an id that does not exist; revoking a revoked key is a
// no-op.
func (s *Store) RevokeTenantKey(ctx context.Context, tenant, id, by string) error {
	// A key is revoked by naming its tenant: AllTenants names none here.
	if err := checkTenant(tenant); err != nil {
		return err
	}
	_, err := tenantDocTx(ctx, s, TenantKeys, "tenant key", tenant, id, decodeTenantKey, func(k *TenantKey) string { return k.Tenant },
		func(tx *firestore.Transaction, ref *firestore.DocumentRef, k *TenantKey, now time.Time) error {
			if k.Revoked {
				return nil
			}
			s.wrote(1)
			return tx.Update(ref, []firestore.Update{
				{Path: "revoked", Value: true}, {Path: "revoked_at", Value: now}, {Path: "revoked_by", Value: by},
			})
		})
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	return nil
}

// RevokeTenantKeys revokes every key of tenant and returns how many were
// in force.
func (s *Store) RevokeTenantKeys(ctx context.Context, tenant, by string) (int, error) {
	keys, err := s.ListTenantKeys(ctx, tenant)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		if k.Revoked {
			continue
		}
		if err := s.RevokeTenantKey(ctx, tenant, k.ID, by); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// VerifyTenantKey returns the tenant a key belongs to, or ErrUnknownKey.
// It reads the key's document on every call, so a revocation is effective
// on the next request.
func (s *Store) VerifyTenantKey(ctx context.Context, key string) (string, error) {
	id, sec, ok := parseTenantKey(key)
	if !ok {
		return "", fmt.Errorf("%w: malformed", ErrUnknownKey)
	}
	k, err := getDoc(ctx, s, s.fs.Collection(TenantKeys).Doc(id), "tenant key", decodeTenantKey)
	if errors.Is(err, ErrNotFound) {
		return "", fmt.Errorf("%w: no key %s", ErrUnknownKey, id)
	}
	if err != nil {
		return "", err
	}
	if subtle.ConstantTimeCompare([]byte(digest(sec)), []byte(k.Hash)) != 1 {
		return "", fmt.Errorf("%w: key %s: wrong secret", ErrUnknownKey, id)
	}
	if k.Revoked {
		return "", fmt.Errorf("%w: key %s was revoked", ErrUnknownKey, id)
	}
	if checkTenant(k.Tenant) != nil {
		return "", fmt.Errorf("%w: key %s has no tenant", ErrUnknownKey, id)
	}
	return k.Tenant, nil
}

// parseTenantKey splits "jsdlq_<16 hex>_<43 base64url>".
func parseTenantKey(key string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(key, tenantKeyPrefix)
	if !ok || len(rest) != 2*keyIDBytes+1+base64.RawURLEncoding.EncodedLen(keySecretBytes) {
		return "", "", false
	}
	id, secret = rest[:2*keyIDBytes], rest[2*keyIDBytes+1:]
	if rest[2*keyIDBytes] != '_' || !validKeyID(id) {
		return "", "", false
	}
	if b, err := base64.RawURLEncoding.Strict().DecodeString(secret); err != nil || len(b) != keySecretBytes {
		return "", "", false
	}
	return id, secret, true
}

// newKeyID makes the random id of a tenant key or a webhook: keyIDBytes in
// lower hex, what validKeyID accepts.
func newKeyID() (string, error) {
	b := make([]byte, keyIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// validKeyID reports whether id is an id newKeyID makes (lower hex), so no
// other string reaches Firestore as a document path.
func validKeyID(id string) bool {
	if len(id) != 2*keyIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func digest(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

func decodeTenantKey(snap *firestore.DocumentSnapshot) (*TenantKey, error) {
	return decodeDoc(snap, func(k *TenantKey) *string { return &k.ID })
}
