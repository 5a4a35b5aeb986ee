package secretbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// LocalKeyPrefix starts the name of a local key ("local:<fingerprint>").
const LocalKeyPrefix = "local:"

// Local wraps data keys with a 256-bit key of the local stack, read from a
// file that make up creates under .local/ (CreateLocalKey). The
// configuration refuses it on Google Cloud (config.Secrets): there the
// key-encryption key is Cloud KMS's. It never prints its key.
type Local struct {
	key  []byte
	name string
}

// NewLocal returns the wrapper of a 32-byte key.
func NewLocal(key []byte) (*Local, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("%w: a local key is 32 bytes, not %d", ErrKey, len(key))
	}
	sum := sha256.Sum256(key)
	return &Local{key: append([]byte(nil), key...), name: LocalKeyPrefix + hex.EncodeToString(sum[:8])}, nil
}

// Key is "local:" and the first 8 bytes of the key's SHA-256, in hex.
func (l *Local) Key() string { return l.name }

// LogValue names the key, never its bytes.
func (l *Local) LogValue() slog.Value { return slog.StringValue(l.name) }

// String names the key, never its bytes.
func (l *Local) String() string { return l.name }

// Wrap encrypts dek with the local key (AES-256-GCM, nonce first).
func (l *Local) Wrap(_ context.Context, dek, aad []byte) ([]byte, error) {
	nonce, ct, err := gcmSeal(l.key, dek, aad)
	if err != nil {
		return nil, err
	}
	return append(nonce, ct...), nil
}

// Unwrap decrypts a data key this local key wrapped.
func (l *Local) Unwrap(_ context.Context, key string, wrapped, aad []byte) ([]byte, error) {
	if key != l.name {
		return nil, fmt.Errorf("%w: the secret was sealed with %s, this box has %s", ErrKey, key, l.name)
	}
	if len(wrapped) < gcmNonceSize {
		return nil, fmt.Errorf("%w: wrapped data key of %d bytes", ErrOpen, len(wrapped))
	}
	return gcmOpen(l.key, wrapped[:gcmNonceSize], wrapped[gcmNonceSize:], aad)
}

// LoadLocalKey reads a key file: the standard base64 of 32 bytes, in a
// file nobody but its owner may read (as ssh demands of its keys).
func LoadLocalKey(path string) (*Local, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: local key file: %v", ErrKey, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: local key file %s is readable by others (mode %04o); chmod 600 it", ErrKey, path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: local key file: %v", ErrKey, err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("%w: local key file %s is not base64", ErrKey, path)
	}
	return NewLocal(key)
}

// CreateLocalKey writes a new random key to path (mode 0600, its
// directory created) unless a file is there already: the key of the
// secrets a local stack seals stays the same across restarts. created
// tells whether it wrote one.
func CreateLocalKey(path string) (created bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("secretbox: local key directory: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return false, fmt.Errorf("secretbox: local key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("secretbox: local key file: %w", err)
	}
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return false, fmt.Errorf("secretbox: write local key file: %w", err)
	}
	return true, nil
}
