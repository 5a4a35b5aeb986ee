// Package webhook signs and verifies jsdlq's tenant webhooks by the Standard
// Webhooks scheme (https://www.standardwebhooks.com): every request carries
//
//	webhook-id:        the notification id (the same on every retry)
//	webhook-timestamp: Unix seconds when this attempt was signed
//	webhook-signature: v1,<base64 HMAC-SHA256 over "id.timestamp.body">
//
// keyed by the endpoint's secret "whsec_<base64 key>". A receiver calls
// Verify with its secret, the request's headers and its raw body; it should
// also drop a webhook-id it has seen (a retry after a lost answer repeats
// one). Signing and verifying use the standard library alone, so a
// receiver written in Go can import the package with nothing else
// (golang.org/x/net, for the guard's host names, is its one dependency).
//
// It also decides which endpoints jsdlq may call at all (Guard): never one
// of jsdlq's own addresses however the URL spells them, and outside local
// mode only https to public addresses, checked when an endpoint is
// registered, before each delivery and again on every connection, after
// DNS resolution.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of the Standard Webhooks scheme.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret, so a leaked one is recognisable.
const SecretPrefix = "whsec_"

// DefaultTolerance is how far a timestamp may be from the receiver's clock
// before Verify refuses it: a captured request replayed later is refused.
const DefaultTolerance = 5 * time.Minute

// keyBytes is the size of a new secret's key.
const keyBytes = 32

var (
	// ErrBadSecret is a secret that is not "whsec_<base64>" of a key.
	ErrBadSecret = errors.New("webhook: malformed secret")
	// ErrNoSignature is a request without the three headers.
	ErrNoSignature = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrBadTimestamp is a timestamp that is malformed or outside the
	// tolerance.
	ErrBadTimestamp = errors.New("webhook: timestamp malformed or out of tolerance")
	// ErrBadSignature is a request no v1 signature of which matches.
	ErrBadSignature = errors.New("webhook: no matching signature")
)

// Secret is an endpoint's signing secret, "whsec_<base64 key>". It never
// prints: logs and %v show it redacted; Reveal is the one way out, for the
// single time it is shown to its owner.
type Secret string

// NewSecret returns a random secret.
func NewSecret() (Secret, error) {
	k := make([]byte, keyBytes)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("webhook: secret: %w", err)
	}
	return Secret(SecretPrefix + base64.StdEncoding.EncodeToString(k)), nil
}

// ParseSecret checks s's form.
func ParseSecret(s string) (Secret, error) {
	sec := Secret(strings.TrimSpace(s))
	if _, err := sec.key(); err != nil {
		return "", err
	}
	return sec, nil
}

func (s Secret) key() ([]byte, error) {
	raw, ok := strings.CutPrefix(string(s), SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: no %s prefix", ErrBadSecret, SecretPrefix)
	}
	k, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(k) < 16 {
		return nil, fmt.Errorf("%w: not the base64 of a key of at least 16 bytes", ErrBadSecret)
	}
	return k, nil
}

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

const redacted = SecretPrefix + "REDACTED"

// String is redacted: a secret formatted by mistake does not leak.
func (s Secret) String() string { return redacted }

// GoString is redacted too (%#v).
func (s Secret) GoString() string { return redacted }

// LogValue keeps the secret out of structured logs.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// Sign returns the webhook-signature value of body sent as message id at
// ts: "v1,<base64 HMAC-SHA256(key, id.timestamp.body)>".
func Sign(secret Secret, id string, ts time.Time, body []byte) (string, error) {
	k, err := secret.key()
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(k, id, ts.Unix(), body)), nil
}

func mac(key []byte, id string, unix int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(unix, 10) + "."))
	m.Write(body)
	return m.Sum(nil)
}

// SetHeaders sets the three headers of body sent as message id at ts.
func SetHeaders(h http.Header, secret Secret, id string, ts time.Time, body []byte) error {
	sig, err := Sign(secret, id, ts, body)
	if err != nil {
		return err
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}

// Verify checks a received webhook: the headers h, the raw body, the
// receiver's clock now and how far the timestamp may be from it (0:
// DefaultTolerance). The signature header may list several space-separated
// signatures (during a secret rotation); one matching v1 signature is
// enough. It returns the webhook id, for the receiver's deduplication.
func Verify(secret Secret, h http.Header, body []byte, now time.Time, tolerance time.Duration) (string, error) {
	k, err := secret.key()
	if err != nil {
		return "", err
	}
	id, tsRaw, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsRaw == "" || sigs == "" {
		return "", ErrNoSignature
	}
	unix, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: %q", ErrBadTimestamp, tsRaw)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return "", fmt.Errorf("%w: %s from now", ErrBadTimestamp, d.Round(time.Second))
	}
	want := mac(k, id, unix, body)
	for _, s := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return id, nil
		}
	}
	return "", ErrBadSignature
}
