// Package secretbox keeps small secrets (webhook signing keys) encrypted at
// rest by envelope encryption: each secret is sealed with a data key of
// its own (AES-256-GCM), and the data key is stored wrapped by a
// key-encryption key that never leaves its keeper: Cloud KMS in
// production (KMS), a key file in the local stack (Local). The caller's
// associated data (for a webhook secret, its tenant and webhook id) binds
// both the ciphertext and the wrapped data key to their record: a sealed
// secret copied to another record does not open.
//
// What is stored is opaque bytes (a small versioned JSON document naming
// the key-encryption key); the store keeps them without knowing their
// form. Rotation: a Cloud KMS key's new primary version wraps new data
// keys while the old versions still unwrap old ones; Rewrap moves a
// sealed secret's data key to the current key (version or key name)
// without touching the secret.
package secretbox

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
)

var (
	// ErrOpen is a sealed secret that does not open: tampered, moved to
	// another record (other associated data) or not a sealed secret at
	// all. No retry helps.
	ErrOpen = errors.New("secretbox: the sealed secret does not open")
	// ErrKey is a key-encryption key that cannot be used: misconfigured,
	// not this box's, refused by its keeper.
	ErrKey = errors.New("secretbox: key-encryption key unavailable")
)

// Wrapper keeps the key-encryption key: it wraps new data keys with the
// current key and unwraps data keys wrapped by any key it can still use.
type Wrapper interface {
	// Key names the key new data keys are wrapped with: a Cloud KMS
	// CryptoKey name, or "local:<fingerprint>".
	Key() string
	// Wrap encrypts dek with Key, bound to aad.
	Wrap(ctx context.Context, dek, aad []byte) ([]byte, error)
	// Unwrap decrypts a data key that key wrapped, bound to aad. A
	// wrapped key that does not authenticate is ErrOpen.
	Unwrap(ctx context.Context, key string, wrapped, aad []byte) ([]byte, error)
}

// Box seals and opens secrets with a Wrapper.
type Box struct {
	w Wrapper
}

// New returns a Box whose data keys w wraps.
func New(w Wrapper) *Box { return &Box{w: w} }

// Key names the key-encryption key new seals use.
func (b *Box) Key() string { return b.w.Key() }

// envelopeVersion is the format of what Seal returns.
const envelopeVersion = 1

// envelope is a sealed secret as stored.
type envelope struct {
	V int `json:"v"`
	// KEK names the key that wrapped DEK (Wrapper.Key when sealed).
	KEK        string `json:"kek"`
	DEK        []byte `json:"dek"`
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ct"`
}

// Seal encrypts plaintext under a new data key, both bound to aad, and
// returns what to store.
func (b *Box) Seal(ctx context.Context, plaintext, aad []byte) ([]byte, error) {
	dek := make([]byte, 32)
	if _, err := rand.Read(dek); err != nil {
		return nil, fmt.Errorf("secretbox: data key: %w", err)
	}
	defer clear(dek)
	nonce, ct, err := gcmSeal(dek, plaintext, aad)
	if err != nil {
		return nil, err
	}
	wrapped, err := b.w.Wrap(ctx, dek, aad)
	if err != nil {
		return nil, err
	}
	return json.Marshal(envelope{V: envelopeVersion, KEK: b.w.Key(), DEK: wrapped, Nonce: nonce, Ciphertext: ct})
}

// Open returns the secret sealed bound to aad.
func (b *Box) Open(ctx context.Context, sealed, aad []byte) ([]byte, error) {
	env, dek, err := b.unwrap(ctx, sealed, aad)
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	return gcmOpen(dek, env.Nonce, env.Ciphertext, aad)
}

// KeyOf names the key-encryption key that wrapped sealed's data key.
func KeyOf(sealed []byte) (string, error) {
	env, err := parse(sealed)
	return env.KEK, err
}

// Rewrap returns sealed with its data key wrapped again by the current
// key (a Cloud KMS key's primary version, or another key), the secret and
// its ciphertext unchanged: the rotation of the key-encryption key. The
// data key must open the secret first, so a rewrap never stores what
// would not open.
func (b *Box) Rewrap(ctx context.Context, sealed, aad []byte) ([]byte, error) {
	env, dek, err := b.unwrap(ctx, sealed, aad)
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	if _, err := gcmOpen(dek, env.Nonce, env.Ciphertext, aad); err != nil {
		return nil, err
	}
	wrapped, err := b.w.Wrap(ctx, dek, aad)
	if err != nil {
		return nil, err
	}
	env.KEK, env.DEK = b.w.Key(), wrapped
	return json.Marshal(env)
}

func parse(sealed []byte) (envelope, error) {
	var env envelope
	if err := json.Unmarshal(sealed, &env); err != nil || env.V != envelopeVersion || env.KEK == "" ||
		len(env.DEK) == 0 || len(env.Nonce) != gcmNonceSize || len(env.Ciphertext) < gcmTagSize {
		return envelope{}, fmt.Errorf("%w: not a sealed secret of version %d", ErrOpen, envelopeVersion)
	}
	return env, nil
}

func (b *Box) unwrap(ctx context.Context, sealed, aad []byte) (envelope, []byte, error) {
	env, err := parse(sealed)
	if err != nil {
		return envelope{}, nil, err
	}
	dek, err := b.w.Unwrap(ctx, env.KEK, env.DEK, aad)
	if err != nil {
		return envelope{}, nil, err
	}
	if len(dek) != 32 {
		clear(dek)
		return envelope{}, nil, fmt.Errorf("%w: the data key is not 256 bits", ErrOpen)
	}
	return env, dek, nil
}

const (
	gcmNonceSize = 12
	gcmTagSize   = 16
)

// gcmSeal encrypts plaintext with AES-256-GCM under key, a random nonce.
func gcmSeal(key, plaintext, aad []byte) (nonce, ct []byte, err error) {
	aead, err := newGCM(key)
	if err != nil {
		return nil, nil, err
	}
	nonce = make([]byte, gcmNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, fmt.Errorf("secretbox: nonce: %w", err)
	}
	return nonce, aead.Seal(nil, nonce, plaintext, aad), nil
}

// gcmOpen is gcmSeal's inverse; anything that does not authenticate is
// ErrOpen.
func gcmOpen(key, nonce, ct, aad []byte) ([]byte, error) {
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	if len(nonce) != gcmNonceSize {
		return nil, fmt.Errorf("%w: nonce of %d bytes", ErrOpen, len(nonce))
	}
	pt, err := aead.Open(nil, nonce, ct, aad)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOpen, err)
	}
	return pt, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	c, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	return cipher.NewGCM(c)
}

// Close releases the wrapper's client, if it has one.
func (b *Box) Close() error {
	if c, ok := b.w.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
