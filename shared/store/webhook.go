package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// This file holds the tenant webhook endpoints (issue 17): a tenant's HTTPS
// endpoint that receives the tenant's own notifications, signed with the
// endpoint's secret. The secret is kept sealed (shared/hooksecret seals and
// opens it, envelope-encrypted and bound to the endpoint's tenant and id);
// the store keeps the sealed bytes without knowing their form. Endpoints
// added before secrets were sealed still hold the secret in clear (secret)
// until it is sealed in its place (SealWebhookSecret). Whether a URL may be
// called at all is the caller's check (webhook.Guard) before CreateWebhook,
// and the deliverer's on every connection; the store keeps every endpoint
// inside its tenant.
//
// Fan-out: an outbox notification a tenant's webhooks receive is staged
// with webhooks_pending set; a flusher with a webhook queue creates one
// delivery task per enabled endpoint of the tenant and clears it
// (PendingWebhookFanOut, WebhookFanOutDone).

// Webhooks is the collection of endpoints, one document per endpoint id.
const Webhooks = "webhooks"

// MaxWebhooksPerTenant bounds a tenant's endpoints: each notification is
// one delivery task per endpoint.
const MaxWebhooksPerTenant = 10

// ErrWebhookRefused is an endpoint the store will not add: the tenant's
// limit is reached, or the URL is registered already.
var ErrWebhookRefused = errors.New("store: webhook refused")

// Webhook is a tenant's endpoint.
type Webhook struct {
	ID     string `firestore:"-" json:"id"`
	Tenant string `firestore:"tenant" json:"tenant"`
	URL    string `firestore:"url" json:"url"`
	// SealedSecret is the signing secret, sealed for this endpoint
	// (hooksecret); it is never listed or logged.
	SealedSecret []byte `firestore:"secret_sealed,omitempty" json:"-"`
	// Secret is the signing secret in clear of an endpoint added before
	// secrets were sealed, until it is sealed (SealWebhookSecret clears
	// it); empty for every other.
	Secret  webhook.Secret `firestore:"secret,omitempty" json:"-"`
	Enabled bool           `firestore:"enabled" json:"enabled"`
	// Failures is the current run of failed deliveries; a success ends it.
	Failures       int       `firestore:"consecutive_failures" json:"consecutive_failures"`
	Deliveries     int64     `firestore:"deliveries" json:"deliveries"`
	LastStatus     int       `firestore:"last_status,omitempty" json:"last_status,omitempty"`
	LastError      string    `firestore:"last_error,omitempty" json:"last_error,omitempty"`
	LastAttemptAt  time.Time `firestore:"last_attempt_at,omitempty" json:"last_attempt_at,omitzero"`
	LastSuccessAt  time.Time `firestore:"last_success_at,omitempty" json:"last_success_at,omitzero"`
	DisabledAt     time.Time `firestore:"disabled_at,omitempty" json:"disabled_at,omitzero"`
	DisabledReason string    `firestore:"disabled_reason,omitempty" json:"disabled_reason,omitempty"`
	CreatedAt      time.Time `firestore:"created_at" json:"created_at"`
	CreatedBy      string    `firestore:"created_by" json:"created_by"`
	EnabledAt      time.Time `firestore:"enabled_at,omitempty" json:"enabled_at,omitzero"`
	EnabledBy      string    `firestore:"enabled_by,omitempty" json:"enabled_by,omitempty"`
}

// Host is the endpoint's host, what notifications about it name.
func (w *Webhook) Host() string {
	if u, err := url.Parse(w.URL); err == nil {
		return u.Hostname()
	}
	return ""
}

func (s *Store) webhookRef(id string) *firestore.DocumentRef {
	return s.fs.Collection(Webhooks).Doc(id)
}

func decodeWebhook(snap *firestore.DocumentSnapshot) (*Webhook, error) {
	return decodeDoc(snap, func(w *Webhook) *string { return &w.ID })
}

// NewWebhook is an endpoint to add.
type NewWebhook struct {
	// ID is the endpoint's id, from NewWebhookID: the secret is sealed
	// for it before the endpoint exists.
	ID     string
	Tenant string
	// URL must have passed webhook.Guard.Check.
	URL string
	// By is who adds it.
	By string
	// SealedSecret is its signing secret, sealed for ID and Tenant.
	SealedSecret []byte
}

// NewWebhookID returns a new endpoint id.
func NewWebhookID() (string, error) {
	id, err := newKeyID()
	if err != nil {
		return "", fmt.Errorf("webhook id: %w", err)
	}
	return id, nil
}

// CreateWebhook adds endpoint nw, enabled, and returns it.
func (s *Store) CreateWebhook(ctx context.Context, nw NewWebhook) (*Webhook, error) {
	tenant, rawURL := nw.Tenant, nw.URL
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	if strings.TrimSpace(nw.By) == "" {
		return nil, fmt.Errorf("%w: who adds a webhook must be named", ErrInvalid)
	}
	if rawURL == "" || len(rawURL) > webhook.MaxURLLen {
		return nil, fmt.Errorf("%w: webhook URL of %d characters", ErrInvalid, len(rawURL))
	}
	if !validKeyID(nw.ID) {
		return nil, fmt.Errorf("%w: webhook id %q is not one NewWebhookID makes", ErrInvalid, nw.ID)
	}
	if len(nw.SealedSecret) == 0 {
		return nil, fmt.Errorf("%w: a webhook's secret is stored sealed, and none was given", ErrInvalid)
	}
	w := &Webhook{ID: nw.ID, Tenant: tenant, URL: rawURL, SealedSecret: nw.SealedSecret, Enabled: true,
		CreatedAt: s.Now(), CreatedBy: nw.By}
	// The limit and the duplicate check read the tenant's endpoints in the
	// transaction that adds one, so two concurrent adds cannot both pass.
	err := s.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snaps, err := readAll(s, tx.Documents(s.fs.Collection(Webhooks).Where("tenant", "==", tenant)))
		if err != nil {
			return err
		}
		if len(snaps) >= MaxWebhooksPerTenant {
			return fmt.Errorf("%w: tenant %s has %d webhooks, the most allowed", ErrWebhookRefused, tenant, len(snaps))
		}
		for _, snap := range snaps {
			if u, err := snap.DataAt("url"); err == nil && u == rawURL {
				return fmt.Errorf("%w: %s is registered already as webhook %s", ErrWebhookRefused, rawURL, snap.Ref.ID)
			}
		}
		s.wrote(1)
		return tx.Create(s.webhookRef(w.ID), w)
	})
	if errors.Is(err, ErrWebhookRefused) {
		return nil, err
	}
	if err != nil {
		return nil, txError("create webhook of "+tenant, err)
	}
	return w, nil
}

// SealWebhookSecret stores sealed as the secret of endpoint w.ID in place
// of the one w holds (its clear secret, or an earlier sealed form) and
// drops the clear one. When the endpoint holds another secret by now (a
// concurrent seal went first) nothing changes and changed is false: a
// repeated or concurrent seal is harmless. A removed endpoint is
// ErrNotFound.
func (s *Store) SealWebhookSecret(ctx context.Context, w *Webhook, sealed []byte) (changed bool, err error) {
	if len(sealed) == 0 {
		return false, fmt.Errorf("%w: an empty sealed secret", ErrInvalid)
	}
	_, err = s.updateWebhook(ctx, w.Tenant, w.ID, func(tx *firestore.Transaction, ref *firestore.DocumentRef, now *Webhook, _ time.Time) error {
		if now.Secret != w.Secret || !bytes.Equal(now.SealedSecret, w.SealedSecret) {
			return nil
		}
		changed = true
		s.wrote(1)
		return tx.Update(ref, []firestore.Update{{Path: "secret_sealed", Value: sealed}, {Path: "secret", Value: firestore.Delete}})
	})
	return changed, err
}

// EachWebhook calls f with every endpoint of every tenant, in pages of
// 100 by id; an error of f ends it.
func (s *Store) EachWebhook(ctx context.Context, f func(*Webhook) error) error {
	q := s.fs.Collection(Webhooks).OrderBy(firestore.DocumentID, firestore.Asc)
	after := ""
	for {
		page := q
		if after != "" {
			page = q.StartAfter(after)
		}
		hooks, more, err := pageDocs(ctx, s, page, 100, Webhooks, decodeWebhook)
		if err != nil {
			return err
		}
		for _, w := range hooks {
			if err := f(w); err != nil {
				return err
			}
			after = w.ID
		}
		if !more {
			return nil
		}
	}
}

// ListWebhooks returns tenant's endpoints, oldest first.
//
// A tenant name no endpoint can be registered for (empty, over-long, with
// control characters) is ErrInvalid.
func (s *Store) ListWebhooks(ctx context.Context, tenant string) ([]*Webhook, error) {
	return tenantDocs(ctx, s, Webhooks, tenant, decodeWebhook, func(w *Webhook) (time.Time, string) { return w.CreatedAt, w.ID })
}

// GetWebhook returns endpoint id of tenant; one of another tenant is
// ErrNotFound, like one that does not exist.
func (s *Store) GetWebhook(ctx context.Context, tenant, id string) (*Webhook, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	w, err := s.WebhookByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if w.Tenant != tenant {
		return nil, fmt.Errorf("%w: webhook %s", ErrNotFound, id)
	}
	return w, nil
}

// WebhookByID returns an endpoint whatever its tenant: for the deliverer,
// which checks the tenant against the notification's.
func (s *Store) WebhookByID(ctx context.Context, id string) (*Webhook, error) {
	if !validKeyID(id) {
		return nil, fmt.Errorf("%w: webhook %q", ErrNotFound, id)
	}
	return getDoc(ctx, s, s.webhookRef(id), "webhook", decodeWebhook)
}

// DeleteWebhook removes endpoint id of tenant; its pending deliveries find
// it gone and are dropped.
func (s *Store) DeleteWebhook(ctx context.Context, tenant, id string) error {
	_, err := s.updateWebhook(ctx, tenant, id, func(tx *firestore.Transaction, ref *firestore.DocumentRef, _ *Webhook, _ time.Time) error {
		s.wrote(1)
		return tx.Delete(ref)
	})
	return err
}

// EnableWebhook enables endpoint id of tenant again, with a new run of
// failures; enabling an enabled endpoint changes nothing.
func (s *Store) EnableWebhook(ctx context.Context, tenant, id, by string) (*Webhook, error) {
	return s.updateWebhook(ctx, tenant, id, func(tx *firestore.Transaction, ref *firestore.DocumentRef, w *Webhook, now time.Time) error {
		if w.Enabled {
			return nil
		}
		w.Enabled, w.Failures, w.DisabledAt, w.DisabledReason, w.EnabledAt, w.EnabledBy = true, 0, time.Time{}, "", now, by
		s.wrote(1)
		return tx.Set(ref, w)
	})
}

// updateWebhook runs f on endpoint id of tenant ("" for any tenant) in a
// transaction.
func (s *Store) updateWebhook(ctx context.Context, tenant, id string, f func(*firestore.Transaction, *firestore.DocumentRef, *Webhook, time.Time) error) (*Webhook, error) {
	return tenantDocTx(ctx, s, Webhooks, "webhook", tenant, id, decodeWebhook, func(w *Webhook) string { return w.Tenant }, f)
}

// WebhookAttempt is the outcome of one delivery.
type WebhookAttempt struct {
	OK     bool
	Status int    // the endpoint's HTTP status; 0 when none came
	Error  string // why it failed
}

// RecordWebhookAttempt records a delivery to endpoint id. A success ends
// the run of failures; a failure extends it, and the one that makes it
// disableAfter long disables the endpoint and stages a webhook_disabled
// notification for the operators in the same transaction, so the
// notification exists exactly when the endpoint is disabled. A disabled
// endpoint is never enabled by a late success: only an operator or its
// tenant enables it.
func (s *Store) RecordWebhookAttempt(ctx context.Context, id string, a WebhookAttempt, disableAfter int) (*Webhook, error) {
	return s.updateWebhook(ctx, AllTenants, id, func(tx *firestore.Transaction, ref *firestore.DocumentRef, w *Webhook, now time.Time) error {
		w.LastAttemptAt, w.LastStatus = now, a.Status
		if a.OK {
			w.Failures, w.LastError, w.LastSuccessAt = 0, "", now
			w.Deliveries++
		} else {
			w.Failures++
			w.LastError = truncate(a.Error, 500)
		}
		if !a.OK && w.Enabled && w.Failures >= max(1, disableAfter) {
			w.Enabled, w.DisabledAt = false, now
			w.DisabledReason = fmt.Sprintf("%d consecutive failed deliveries, the last: %s", w.Failures, w.LastError)
			n := event.NewNotification(event.NotifyWebhookDisabled, w.Tenant, w.ID, now)
			n.WebhookID, n.WebhookHost = w.ID, w.Host()
			n.Summary = fmt.Sprintf("webhook %s of tenant %s (%s) is disabled after %d consecutive failed deliveries; the last: %s; enable it with dlqctl webhook enable %s %s",
				w.ID, w.Tenant, n.WebhookHost, w.Failures, w.LastError, w.Tenant, w.ID)
			if _, err := s.stage(tx, n, "", ""); err != nil {
				return err
			}
		}
		s.wrote(1)
		return tx.Set(ref, w)
	})
}

// truncate keeps at most n bytes of s, cut at a rune boundary: Firestore
// refuses a string that is not valid UTF-8, and error texts carry hosts
// and receivers' words in any script.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// PendingWebhookFanOut returns up to limit outbox notifications whose
// webhook deliveries are not created yet.
func (s *Store) PendingWebhookFanOut(ctx context.Context, limit int) ([]*Outbox, error) {
	return queryDocs(ctx, s, s.fs.Collection(Notifications).Where("webhooks_pending", "==", true).Limit(limit), Notifications+" pending webhooks", decodeOutbox)
}

// WebhookFanOutDone records that notification id's deliveries exist. A
// notification gone meanwhile (expired) is done too.
func (s *Store) WebhookFanOutDone(ctx context.Context, id string) error {
	_, err := s.outboxRef(id).Update(ctx, []firestore.Update{{Path: "webhooks_pending", Value: firestore.Delete}})
	s.wrote(1)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("firestore update %s/%s: %w", Notifications, id, err)
	}
	return nil
}
