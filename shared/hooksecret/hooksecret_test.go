package hooksecret_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/internal/secrettest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSealedAtRest: what Firestore holds is not the secret, it opens for
// its own endpoint only (a copy moved to another tenant's or another
// webhook's record does not open), and signing with the opened secret
// gives the signature the secret shown at creation gives.
func TestSealedAtRest(t *testing.T) {
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	st := store.New(fs)
	box, _ := secrettest.Box(t)

	acme, sec, err := hooksecret.Create(ctx, st, box, "acme", "https://hooks.acme.example/a", "ops")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fs.Collection(store.Webhooks).Doc(acme.ID).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := snap.DataAt("secret_sealed")
	stored, _ := raw.([]byte)
	if len(stored) == 0 || bytes.Contains(stored, []byte(sec.Reveal()[6:])) || bytes.Contains(stored, []byte(sec.Reveal())) {
		t.Fatalf("stored secret_sealed = %q: want sealed bytes that do not contain the secret", stored)
	}
	if _, ok := snap.Data()["secret"]; ok {
		t.Errorf("a new endpoint's document has a clear secret: %v", snap.Data())
	}
	read, err := st.WebhookByID(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, legacy, err := hooksecret.Open(ctx, box, read)
	if err != nil || legacy || got != sec {
		t.Fatalf("Open(acme's endpoint) = legacy %v, %v, want the secret shown at creation", legacy, err)
	}
	now := time.Unix(1_800_000_000, 0)
	want, _ := webhook.Sign(sec, "n-1", now, []byte("{}"))
	if sig, _ := webhook.Sign(got, "n-1", now, []byte("{}")); sig != want {
		t.Errorf("signature with the opened secret = %q, want %q", sig, want)
	}

	// The same sealed bytes in another record do not open.
	globex, _, err := hooksecret.Create(ctx, st, box, "globex", "https://hooks.globex.example/g", "ops")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := hooksecret.Create(ctx, st, box, "acme", "https://hooks.acme.example/b", "ops")
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []*store.Webhook{globex, other} {
		if _, err := fs.Collection(store.Webhooks).Doc(to.ID).Update(ctx, []firestore.Update{{Path: "secret_sealed", Value: stored}}); err != nil {
			t.Fatal(err)
		}
		moved, err := st.WebhookByID(ctx, to.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := hooksecret.Open(ctx, box, moved); !errors.Is(err, secretbox.ErrOpen) {
			t.Errorf("Open(acme's sealed secret in %s's endpoint %s) = %v, want ErrOpen", to.Tenant, to.ID, err)
		}
	}
	// The bound data cannot shift between tenant and id.
	if bytes.Equal(hooksecret.AAD("ab", "c"), hooksecret.AAD("a", "bc")) {
		t.Errorf("AAD(ab, c) = AAD(a, bc): a tenant name shifts into the id")
	}
}

// TestClearSecretOfAnOldEndpoint: an endpoint added before secrets were
// sealed opens as legacy, Seal stores its sealed form in place (once: a
// second Seal on what was read changes nothing), and an endpoint with no
// secret at all is ErrNoSecret.
func TestClearSecretOfAnOldEndpoint(t *testing.T) {
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	st := store.New(fs)
	box, _ := secrettest.Box(t)
	clear, _ := webhook.NewSecret()
	id := "00112233445566aa"
	if _, err := fs.Collection(store.Webhooks).Doc(id).Set(ctx, map[string]any{"tenant": "acme", "url": "https://hooks.acme.example/old",
		"secret": clear.Reveal(), "enabled": true, "created_at": time.Now(), "created_by": "ops"}); err != nil {
		t.Fatal(err)
	}
	old, err := st.WebhookByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sec, legacy, err := hooksecret.Open(ctx, box, old)
	if err != nil || !legacy || sec != clear {
		t.Fatalf("Open(old endpoint) = legacy %v, %v, want its clear secret, legacy", legacy, err)
	}
	for i, want := range []bool{true, false} {
		if changed, err := hooksecret.Seal(ctx, st, box, old, sec); err != nil || changed != want {
			t.Errorf("Seal #%d = %v, %v, want changed %v", i+1, changed, err, want)
		}
	}
	now, err := st.WebhookByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got, legacy, err := hooksecret.Open(ctx, box, now); err != nil || legacy || got != clear || now.Secret != "" {
		t.Errorf("Open(sealed old endpoint) = legacy %v, %v (clear field %q), want the same secret, sealed only", legacy, err, now.Secret)
	}
	if _, _, err := hooksecret.Open(ctx, box, &store.Webhook{ID: "ffffffffffffffff", Tenant: "acme"}); !errors.Is(err, hooksecret.ErrNoSecret) {
		t.Errorf("Open(no secret) = %v, want ErrNoSecret", err)
	}
}
