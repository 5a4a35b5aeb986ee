package secretbox_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/kms/apiv1/kmspb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/jsdlq/jsdlq/shared/secretbox"
)

// fakeKMS is a local fake of Cloud KMS's gRPC KeyManagementService,
// Encrypt and Decrypt of symmetric keys only: Google ships no Cloud KMS
// emulator (unlike Firestore's, Pub/Sub's), so the KMS client is tested
// against this server on a free port, over the real wire protocol. It
// behaves as the documentation says Cloud KMS does: Encrypt uses the
// key's primary version, the version is inside the ciphertext and
// Decrypt finds it, a disabled version refuses (FAILED_PRECONDITION), a
// ciphertext that does not authenticate with the associated data is
// INVALID_ARGUMENT, a request whose CRC32C does not match is refused and
// answers carry their own CRC32C and the verified flags.
type fakeKMS struct {
	kmspb.UnimplementedKeyManagementServiceServer
	mu       sync.Mutex
	keys     map[string]*fakeKey // CryptoKey name -> versions
	corrupt  atomic.Bool         // flip the answer's checksum
	accepted atomic.Int32
}

type fakeKey struct {
	versions [][]byte // index+1 is the version number
	disabled map[int]bool
	primary  int
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crcOf(b []byte) int64 { return int64(crc32.Checksum(b, castagnoli)) }

// startFakeKMS serves a fake KMS on 127.0.0.1 with keys, one version each.
func startFakeKMS(t *testing.T, keys ...string) (*fakeKMS, []option.ClientOption) {
	t.Helper()
	f := &fakeKMS{keys: map[string]*fakeKey{}}
	for _, k := range keys {
		f.keys[k] = &fakeKey{disabled: map[int]bool{}}
		f.rotate(k)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingListener{Listener: ln, n: &f.accepted}
	s := grpc.NewServer()
	kmspb.RegisterKeyManagementServiceServer(s, f)
	go s.Serve(counting)
	t.Cleanup(s.Stop)
	return f, []option.ClientOption{option.WithEndpoint(ln.Addr().String()), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
}

type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// rotate adds a version to key and makes it the primary.
func (f *fakeKMS) rotate(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.keys[key]
	v := make([]byte, 32)
	rand.Read(v)
	k.versions = append(k.versions, v)
	k.primary = len(k.versions)
}

func (f *fakeKMS) disable(key string, version int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[key].disabled[version] = true
}

func gcm(key []byte) cipher.AEAD {
	b, _ := aes.NewCipher(key)
	a, _ := cipher.NewGCM(b)
	return a
}

// key is the CryptoKey a request names; f.mu is held.
func (f *fakeKMS) key(name string) (*fakeKey, error) {
	k, ok := f.keys[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "CryptoKey %s not found.", name)
	}
	return k, nil
}

func (f *fakeKMS) Encrypt(_ context.Context, r *kmspb.EncryptRequest) (*kmspb.EncryptResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, err := f.key(r.GetName())
	if err != nil {
		return nil, err
	}
	if r.GetPlaintextCrc32C() != nil && r.GetPlaintextCrc32C().GetValue() != crcOf(r.GetPlaintext()) ||
		r.GetAdditionalAuthenticatedDataCrc32C() != nil && r.GetAdditionalAuthenticatedDataCrc32C().GetValue() != crcOf(r.GetAdditionalAuthenticatedData()) {
		return nil, status.Error(codes.InvalidArgument, "The checksum in field plaintext_crc32c did not match the data in field plaintext.")
	}
	nonce := make([]byte, 12)
	rand.Read(nonce)
	ct := binary.BigEndian.AppendUint32(nil, uint32(k.primary))
	ct = append(ct, nonce...)
	ct = gcm(k.versions[k.primary-1]).Seal(ct, nonce, r.GetPlaintext(), r.GetAdditionalAuthenticatedData())
	sum := crcOf(ct)
	if f.corrupt.Load() {
		sum++
	}
	return &kmspb.EncryptResponse{Name: fmt.Sprintf("%s/cryptoKeyVersions/%d", r.GetName(), k.primary), Ciphertext: ct,
		CiphertextCrc32C: wrapperspb.Int64(sum), VerifiedPlaintextCrc32C: r.GetPlaintextCrc32C() != nil,
		VerifiedAdditionalAuthenticatedDataCrc32C: r.GetAdditionalAuthenticatedDataCrc32C() != nil}, nil
}

func (f *fakeKMS) Decrypt(_ context.Context, r *kmspb.DecryptRequest) (*kmspb.DecryptResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, err := f.key(r.GetName())
	if err != nil {
		return nil, err
	}
	ct := r.GetCiphertext()
	if r.GetCiphertextCrc32C() != nil && r.GetCiphertextCrc32C().GetValue() != crcOf(ct) {
		return nil, status.Error(codes.InvalidArgument, "The checksum in field ciphertext_crc32c did not match the data in field ciphertext.")
	}
	if len(ct) < 4+12+16 {
		return nil, status.Error(codes.InvalidArgument, "Decryption failed: the ciphertext is invalid.")
	}
	v := int(binary.BigEndian.Uint32(ct))
	if v < 1 || v > len(k.versions) {
		return nil, status.Error(codes.InvalidArgument, "Decryption failed: verify that 'name' refers to the correct CryptoKey.")
	}
	if k.disabled[v] {
		return nil, status.Errorf(codes.FailedPrecondition, "%s/cryptoKeyVersions/%d is not enabled.", r.GetName(), v)
	}
	pt, err := gcm(k.versions[v-1]).Open(nil, ct[4:16], ct[16:], r.GetAdditionalAuthenticatedData())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "Decryption failed: verify that 'name' refers to the correct CryptoKey.")
	}
	sum := crcOf(pt)
	if f.corrupt.Load() {
		sum++
	}
	return &kmspb.DecryptResponse{Plaintext: pt, PlaintextCrc32C: wrapperspb.Int64(sum)}, nil
}

const (
	keyA = "projects/p/locations/europe-west1/keyRings/jsdlq/cryptoKeys/secrets"
	keyB = "projects/p/locations/europe-west1/keyRings/jsdlq/cryptoKeys/secrets-2"
)

// TestKMSSealOpen: a secret sealed through Cloud KMS opens with its
// associated data only; the client is made on the first call, not before.
func TestKMSSealOpen(t *testing.T) {
	ctx := context.Background()
	f, opts := startFakeKMS(t, keyA)
	w, err := secretbox.NewKMS(keyA, opts...)
	if err != nil {
		t.Fatal(err)
	}
	box := secretbox.New(w)
	defer box.Close()
	if n := f.accepted.Load(); n != 0 {
		t.Errorf("NewKMS connected %d times before any call, want 0 (the client is made on first use)", n)
	}
	secret := []byte("whsec_" + strings.Repeat("k", 44))
	aad := []byte("tenant acme, webhook 0a1b")
	sealed, err := box.Seal(ctx, secret, aad)
	if err != nil {
		t.Fatalf("Seal() = %v", err)
	}
	if bytes.Contains(sealed, secret) || bytes.Contains(sealed, secret[6:20]) {
		t.Errorf("Seal() = %s contains the secret", sealed)
	}
	if k, err := secretbox.KeyOf(sealed); err != nil || k != keyA {
		t.Errorf("KeyOf(sealed) = %q, %v, want %q", k, err, keyA)
	}
	got, err := box.Open(ctx, sealed, aad)
	if err != nil || !bytes.Equal(got, secret) {
		t.Errorf("Open(sealed, aad) = %q, %v, want the secret", got, err)
	}
	if _, err := box.Open(ctx, sealed, []byte("tenant globex, webhook 0a1b")); !errors.Is(err, secretbox.ErrOpen) {
		t.Errorf("Open(sealed, other aad) = %v, want ErrOpen", err)
	}

	// A corrupted answer is an error, never a wrong key.
	f.corrupt.Store(true)
	if _, err := box.Open(ctx, sealed, aad); err == nil || errors.Is(err, secretbox.ErrOpen) {
		t.Errorf("Open() with a corrupted answer = %v, want a retryable error", err)
	}
	if _, err := box.Seal(ctx, secret, aad); err == nil {
		t.Errorf("Seal() with a corrupted answer = nil error")
	}
	f.corrupt.Store(false)

	// A key that does not exist (or is not ours) is ErrKey.
	other, _ := secretbox.NewKMS("projects/p/locations/l/keyRings/r/cryptoKeys/nope", opts...)
	if _, err := secretbox.New(other).Seal(ctx, secret, aad); !errors.Is(err, secretbox.ErrKey) {
		t.Errorf("Seal() with a missing key = %v, want ErrKey", err)
	}
	if _, err := secretbox.NewKMS("projects/p/keyRings/r", opts...); !errors.Is(err, secretbox.ErrKey) {
		t.Errorf("NewKMS(malformed name) = %v, want ErrKey", err)
	}
}

// TestKMSRotation: after the key's new version becomes primary, secrets
// sealed under the old one still open; Rewrap moves a secret's data key
// to the new version (and to another key), after which the old version
// can be disabled without losing it.
func TestKMSRotation(t *testing.T) {
	ctx := context.Background()
	f, opts := startFakeKMS(t, keyA, keyB)
	wa, _ := secretbox.NewKMS(keyA, opts...)
	a := secretbox.New(wa)
	aad := []byte("tenant acme, webhook 0a1b")
	secret := []byte("whsec_rotate")
	old, err := a.Seal(ctx, secret, aad)
	if err != nil {
		t.Fatal(err)
	}
	f.rotate(keyA)
	if got, err := a.Open(ctx, old, aad); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open(sealed under version 1) after rotation = %q, %v", got, err)
	}
	rewrapped, err := a.Rewrap(ctx, old, aad)
	if err != nil {
		t.Fatalf("Rewrap() = %v", err)
	}
	f.disable(keyA, 1)
	if got, err := a.Open(ctx, rewrapped, aad); err != nil || !bytes.Equal(got, secret) {
		t.Errorf("Open(rewrapped) with version 1 disabled = %q, %v", got, err)
	}
	if _, err := a.Open(ctx, old, aad); !errors.Is(err, secretbox.ErrKey) {
		t.Errorf("Open(not rewrapped) with version 1 disabled = %v, want ErrKey", err)
	}

	// To another key: the box of key B still opens what key A sealed (the
	// envelope names its key), and rewraps it under B.
	wb, _ := secretbox.NewKMS(keyB, opts...)
	b := secretbox.New(wb)
	moved, err := b.Rewrap(ctx, rewrapped, aad)
	if err != nil {
		t.Fatalf("Rewrap to key B = %v", err)
	}
	if k, _ := secretbox.KeyOf(moved); k != keyB {
		t.Errorf("KeyOf(moved) = %q, want %q", k, keyB)
	}
	if got, err := b.Open(ctx, moved, aad); err != nil || !bytes.Equal(got, secret) {
		t.Errorf("Open(moved) = %q, %v", got, err)
	}
	// A rewrap with the wrong associated data stores nothing new.
	if _, err := b.Rewrap(ctx, moved, []byte("tenant globex")); !errors.Is(err, secretbox.ErrOpen) {
		t.Errorf("Rewrap(other aad) = %v, want ErrOpen", err)
	}
}
