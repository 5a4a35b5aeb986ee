package secretbox

import (
	"context"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"

	kms "cloud.google.com/go/kms/apiv1"
	"cloud.google.com/go/kms/apiv1/kmspb"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/jsdlq/jsdlq/shared/config"
)

// kmsTimeout bounds one call when the caller set no deadline.
const kmsTimeout = 10 * time.Second

// KMS wraps data keys with a Cloud KMS symmetric CryptoKey
// (cloudkms.cryptoKeyVersions.useToEncrypt / useToDecrypt, granted by
// roles/cloudkms.cryptoKeyEncrypterDecrypter). Its client is made on first
// use, once. Every call carries CRC32C checksums both ways, as Cloud KMS
// asks of its clients, so a corruption in transit is an error, never a
// wrong key.
type KMS struct {
	key    string
	get    func() (*kms.KeyManagementClient, error)
	closed atomic.Bool
	built  atomic.Bool
}

// NewKMS returns the wrapper of CryptoKey key; opts are the client's
// options (tests point it at a fake server).
func NewKMS(key string, opts ...option.ClientOption) (*KMS, error) {
	if !config.ValidKMSKey(key) {
		return nil, fmt.Errorf("%w: %q is not projects/P/locations/L/keyRings/R/cryptoKeys/K", ErrKey, key)
	}
	k := &KMS{key: key}
	k.get = sync.OnceValues(func() (*kms.KeyManagementClient, error) {
		k.built.Store(true)
		c, err := kms.NewKeyManagementClient(context.Background(), opts...)
		if err != nil {
			return nil, fmt.Errorf("secretbox: cloud kms client: %w", err)
		}
		return c, nil
	})
	return k, nil
}

// Key is the CryptoKey's name.
func (k *KMS) Key() string { return k.key }

// Close closes the client if it was made.
func (k *KMS) Close() error {
	if !k.built.Load() || k.closed.Swap(true) {
		return nil
	}
	c, err := k.get()
	if err != nil {
		return nil
	}
	return c.Close()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) *wrapperspb.Int64Value {
	return wrapperspb.Int64(int64(crc32.Checksum(b, castagnoli)))
}

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, kmsTimeout)
}

// Wrap encrypts dek with the key's primary version.
func (k *KMS) Wrap(ctx context.Context, dek, aad []byte) ([]byte, error) {
	c, err := k.get()
	if err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := c.Encrypt(ctx, &kmspb.EncryptRequest{Name: k.key, Plaintext: dek, PlaintextCrc32C: crc(dek),
		AdditionalAuthenticatedData: aad, AdditionalAuthenticatedDataCrc32C: crc(aad)})
	if err != nil {
		return nil, kmsError("encrypt", k.key, err)
	}
	if !resp.GetVerifiedPlaintextCrc32C() || !resp.GetVerifiedAdditionalAuthenticatedDataCrc32C() ||
		resp.GetCiphertextCrc32C().GetValue() != crc(resp.GetCiphertext()).GetValue() {
		return nil, fmt.Errorf("secretbox: cloud kms encrypt with %s: checksums do not match (corrupted in transit); retry", k.key)
	}
	return resp.GetCiphertext(), nil
}

// Unwrap decrypts a data key that key wrapped: this wrapper's key (any of
// its versions that is enabled) or another key the caller may use.
func (k *KMS) Unwrap(ctx context.Context, key string, wrapped, aad []byte) ([]byte, error) {
	if !config.ValidKMSKey(key) {
		return nil, fmt.Errorf("%w: the secret was sealed with %q, not a Cloud KMS key", ErrKey, key)
	}
	c, err := k.get()
	if err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := c.Decrypt(ctx, &kmspb.DecryptRequest{Name: key, Ciphertext: wrapped, CiphertextCrc32C: crc(wrapped),
		AdditionalAuthenticatedData: aad, AdditionalAuthenticatedDataCrc32C: crc(aad)})
	if err != nil {
		return nil, kmsError("decrypt", key, err)
	}
	if resp.GetPlaintextCrc32C().GetValue() != crc(resp.GetPlaintext()).GetValue() {
		return nil, fmt.Errorf("secretbox: cloud kms decrypt with %s: checksums do not match (corrupted in transit); retry", key)
	}
	return resp.GetPlaintext(), nil
}

// kmsError sorts Cloud KMS's refusals: a ciphertext that does not
// authenticate (other associated data, tampered) is ErrOpen; a key that
// is missing, disabled or not ours to use is ErrKey; the rest (unavailable,
// deadline) may pass on a retry.
func kmsError(op, key string, err error) error {
	switch status.Code(err) {
	case codes.InvalidArgument:
		if op == "encrypt" {
			return fmt.Errorf("%w: cloud kms %s with %s: %v", ErrKey, op, key, status.Convert(err).Message())
		}
		return fmt.Errorf("%w: cloud kms %s with %s: %v", ErrOpen, op, key, status.Convert(err).Message())
	case codes.NotFound, codes.PermissionDenied, codes.FailedPrecondition, codes.Unauthenticated:
		return fmt.Errorf("%w: cloud kms %s with %s: %v", ErrKey, op, key, status.Convert(err).Message())
	}
	return fmt.Errorf("secretbox: cloud kms %s with %s: %w", op, key, err)
}
