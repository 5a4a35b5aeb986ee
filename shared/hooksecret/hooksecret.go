// Package hooksecret keeps the tenant webhooks' signing secrets sealed at
// rest (docs/webhooks.md, "The signing secret at rest"): it makes a new
// endpoint's secret and seals it before the endpoint is stored, opens it
// where a delivery is signed, seals the clear secret of an endpoint added
// before secrets were sealed, and reseals every endpoint after a rotation
// of the key-encryption key. A sealed secret is bound to its endpoint's
// tenant and id (the associated data), so one copied to another endpoint
// does not open.
//
// The store keeps the sealed bytes (store.Webhook.SealedSecret); the
// sealing is a secretbox.Box (Cloud KMS in production, the local stack's
// key file locally).
package hooksecret

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// Box seals and opens secrets (*secretbox.Box).
type Box interface {
	Seal(ctx context.Context, plaintext, aad []byte) ([]byte, error)
	Open(ctx context.Context, sealed, aad []byte) ([]byte, error)
	Rewrap(ctx context.Context, sealed, aad []byte) ([]byte, error)
}

// ErrNoSecret is an endpoint with neither a sealed nor a clear secret: it
// can never be signed for.
var ErrNoSecret = errors.New("hooksecret: the endpoint has no signing secret")

// aadPurpose starts the associated data, so a sealed webhook secret never
// opens as another kind of secret sealed with the same key.
const aadPurpose = "jsdlq.webhook-secret.v1"

// AAD is the associated data that binds a webhook's sealed secret to its
// record: the purpose, the tenant and the id, each length-prefixed (no
// tenant name can shift into the id).
func AAD(tenant, id string) []byte {
	var b []byte
	for _, part := range []string{aadPurpose, tenant, id} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	return b
}

// WebhookCreator stores a new endpoint (*store.Store).
type WebhookCreator interface {
	CreateWebhook(ctx context.Context, n store.NewWebhook) (*store.Webhook, error)
}

// Create adds an endpoint of tenant at rawURL (checked by webhook.Guard)
// with a new secret, sealed before anything is stored, and returns it
// with the secret: the only time the secret is handed out. by is who adds
// it.
func Create(ctx context.Context, st WebhookCreator, box Box, tenant, rawURL, by string) (*store.Webhook, webhook.Secret, error) {
	id, err := store.NewWebhookID()
	if err != nil {
		return nil, "", err
	}
	sec, err := webhook.NewSecret()
	if err != nil {
		return nil, "", err
	}
	sealed, err := box.Seal(ctx, []byte(sec.Reveal()), AAD(tenant, id))
	if err != nil {
		return nil, "", fmt.Errorf("hooksecret: seal the secret of a new webhook of %q: %w", tenant, err)
	}
	w, err := st.CreateWebhook(ctx, store.NewWebhook{ID: id, Tenant: tenant, URL: rawURL, By: by, SealedSecret: sealed})
	if err != nil {
		return nil, "", err
	}
	return w, sec, nil
}

// Open returns w's signing secret. legacy is true when w still holds it in
// clear (added before secrets were sealed): Seal it. A sealed secret that
// does not open for w (tampered, or copied from another endpoint) is
// secretbox.ErrOpen.
func Open(ctx context.Context, box Box, w *store.Webhook) (sec webhook.Secret, legacy bool, err error) {
	switch {
	case len(w.SealedSecret) > 0:
		raw, err := box.Open(ctx, w.SealedSecret, AAD(w.Tenant, w.ID))
		if err != nil {
			return "", false, fmt.Errorf("hooksecret: open the secret of webhook %s: %w", w.ID, err)
		}
		sec, err := webhook.ParseSecret(string(raw))
		if err != nil {
			return "", false, fmt.Errorf("hooksecret: webhook %s: %w", w.ID, err)
		}
		return sec, false, nil
	case w.Secret != "":
		return w.Secret, true, nil
	}
	return "", false, fmt.Errorf("%w: webhook %s", ErrNoSecret, w.ID)
}

// SecretSealer stores an endpoint's sealed secret in place of its clear one
// (*store.Store). Seal needs no more of the store, so a caller that holds
// a narrower view of it can still seal.
type SecretSealer interface {
	SealWebhookSecret(ctx context.Context, w *store.Webhook, sealed []byte) (changed bool, err error)
}

// Seal seals sec, the clear secret w holds, and stores it in its place.
// changed is false when w was sealed meanwhile by someone else: every
// repeat is harmless.
func Seal(ctx context.Context, st SecretSealer, box Box, w *store.Webhook, sec webhook.Secret) (changed bool, err error) {
	sealed, err := box.Seal(ctx, []byte(sec.Reveal()), AAD(w.Tenant, w.ID))
	if err != nil {
		return false, fmt.Errorf("hooksecret: seal the secret of webhook %s: %w", w.ID, err)
	}
	return st.SealWebhookSecret(ctx, w, sealed)
}

// Report counts what Reseal did.
type Report struct {
	// Sealed were endpoints whose clear secret is now sealed.
	Sealed int `json:"sealed"`
	// Rewrapped were sealed endpoints whose data key is now wrapped by the
	// current key-encryption key (version).
	Rewrapped int `json:"rewrapped"`
	// Changed were endpoints changed by someone else during the run (left
	// as they are; run again to include them).
	Changed int `json:"changed"`
	// Failed are endpoints whose secret did not open or could not be
	// stored, by id, with why.
	Failed map[string]string `json:"failed,omitempty"`
}

// Resealer walks every endpoint and stores each one's sealed secret
// (*store.Store).
type Resealer interface {
	EachWebhook(ctx context.Context, f func(*store.Webhook) error) error
	SecretSealer
}

// Reseal seals every endpoint's clear secret and rewraps every sealed one
// with the current key: the one-shot after deploying sealed secrets, and
// the step of a key rotation that lets the old key versions be disabled.
// An endpoint that fails is reported and the run goes on; an error of the
// store ends it. Repeating it is harmless: it only ever stores a sealed
// form of the same secret, each in place of what it read.
func Reseal(ctx context.Context, st Resealer, box Box) (Report, error) {
	r := Report{Failed: map[string]string{}}
	err := st.EachWebhook(ctx, func(w *store.Webhook) error {
		var sealed []byte
		var err error
		legacy := len(w.SealedSecret) == 0
		if legacy {
			if w.Secret == "" {
				r.Failed[w.ID] = ErrNoSecret.Error()
				return nil
			}
			sealed, err = box.Seal(ctx, []byte(w.Secret.Reveal()), AAD(w.Tenant, w.ID))
		} else {
			sealed, err = box.Rewrap(ctx, w.SealedSecret, AAD(w.Tenant, w.ID))
		}
		if err != nil {
			r.Failed[w.ID] = err.Error()
			return nil
		}
		changed, err := st.SealWebhookSecret(ctx, w, sealed)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil // removed meanwhile
		case err != nil:
			r.Failed[w.ID] = err.Error()
		case !changed:
			r.Changed++
		case legacy:
			r.Sealed++
		default:
			r.Rewrapped++
		}
		return nil
	})
	return r, err
}
