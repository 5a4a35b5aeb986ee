package triage

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Firestore location of the operator's override.
const (
	OverrideCollection = "triage-policy"
	OverrideDoc        = "current"
	OverrideField      = "yaml"
)

// DefaultRefresh is how long a loaded policy is used before the override
// document is read again; it bounds both the policy reads per event and how
// long an operator waits for a change to take effect.
const DefaultRefresh = 30 * time.Second

// Loader returns the policy in force: the override from Firestore laid over
// the embedded default (ParseOverride) when it is valid, else the default. A broken override never
// replaces a working policy: the previous good one stays in force and the
// error is logged and kept for LastError.
type Loader struct {
	fs      *firestore.Client
	log     *slog.Logger
	refresh time.Duration
	now     func() time.Time
	opts    []Option

	mu        sync.Mutex
	current   *Policy
	rawSum    [32]byte // hash of the raw override text current was built from
	hasRaw    bool
	loadedAt  time.Time
	lastErr   error
	badRawSum [32]byte // last rejected text, so it is logged once, not per event
}

// LoaderOption configures NewLoader.
type LoaderOption func(*Loader)

// WithRefresh sets how often the override is re-read (default 30 s; 0 reads
// it on every call, for tests).
func WithRefresh(d time.Duration) LoaderOption { return func(l *Loader) { l.refresh = d } }

// WithClock sets the clock used for the refresh interval.
func WithClock(now func() time.Time) LoaderOption { return func(l *Loader) { l.now = now } }

// WithPolicyOptions passes options (WithRand) to every policy parsed.
func WithPolicyOptions(opts ...Option) LoaderOption {
	return func(l *Loader) { l.opts = append(l.opts, opts...) }
}

// NewLoader returns a Loader reading overrides through fs (nil: the default
// only).
func NewLoader(fs *firestore.Client, log *slog.Logger, opts ...LoaderOption) *Loader {
	l := &Loader{fs: fs, log: log, refresh: DefaultRefresh, now: time.Now}
	for _, o := range opts {
		o(l)
	}
	l.current = Default(l.opts...)
	return l
}

// LastError is the error of the last refresh, nil when it succeeded.
func (l *Loader) LastError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Current returns the policy in force. It reads the override at most once
// per refresh interval and never fails: on any error the policy already in
// force is returned.
func (l *Loader) Current(ctx context.Context) *Policy {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.fs == nil || (!l.loadedAt.IsZero() && now.Sub(l.loadedAt) < l.refresh && l.refresh > 0) {
		return l.current
	}
	l.loadedAt = now
	l.lastErr = l.reload(ctx)
	return l.current
}

func (l *Loader) reload(ctx context.Context) error {
	snap, err := l.fs.Collection(OverrideCollection).Doc(OverrideDoc).Get(ctx)
	if status.Code(err) == codes.NotFound {
		if l.hasRaw {
			l.log.InfoContext(ctx, "triage policy override removed; using the embedded default")
			l.current, l.hasRaw = Default(l.opts...), false
		}
		return nil
	}
	if err != nil {
		err = fmt.Errorf("triage: read %s/%s: %w", OverrideCollection, OverrideDoc, err)
		l.log.WarnContext(ctx, "triage policy override unreadable; keeping the policy in force", "error", err, "policy_version", l.current.Version())
		return err
	}
	raw, _ := snap.Data()[OverrideField].(string)
	sum := sha256.Sum256([]byte(raw))
	if l.hasRaw && sum == l.rawSum {
		return nil
	}
	p, err := ParseOverride([]byte(raw), l.opts...)
	if err != nil {
		err = fmt.Errorf("triage: override %s/%s rejected: %w", OverrideCollection, OverrideDoc, err)
		if sum != l.badRawSum {
			l.badRawSum = sum
			l.log.ErrorContext(ctx, "triage policy override rejected; keeping the policy in force", "error", err.Error(), "policy_version", l.current.Version())
		}
		return err
	}
	if p.Version() != l.current.Version() {
		l.log.InfoContext(ctx, "triage policy loaded", "policy_version", p.Version(), "previous_version", l.current.Version())
	}
	l.current, l.rawSum, l.hasRaw = p, sum, true
	return nil
}

// SaveOverride validates doc as an override (laid over the default:
// ParseOverride) and stores it; an invalid document is refused before it
// reaches Firestore. It returns the effective policy's version.
func SaveOverride(ctx context.Context, fs *firestore.Client, doc []byte) (string, error) {
	p, err := ParseOverride(doc)
	if err != nil {
		return "", err
	}
	_, err = fs.Collection(OverrideCollection).Doc(OverrideDoc).Set(ctx, map[string]any{
		OverrideField: string(doc),
		"version":     p.Version(),
		"updated_at":  firestore.ServerTimestamp,
	})
	if err != nil {
		return "", fmt.Errorf("triage: write %s/%s: %w", OverrideCollection, OverrideDoc, err)
	}
	return p.Version(), nil
}

// IsInvalid reports whether err is a policy validation error.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }
