package triage

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// OverrideSource reads the operator's stored override of the default policy
// (the store implements it over triage-policy/current, and owns saving it).
// found is false when there is none; doc is the YAML as written, which may
// be invalid.
type OverrideSource interface {
	PolicyOverrideYAML(ctx context.Context) (doc []byte, found bool, err error)
}

// DefaultRefresh is how long a loaded policy is used before the override
// document is read again; it bounds both the policy reads per event and how
// long an operator waits for a change to take effect.
const DefaultRefresh = 30 * time.Second

// Loader returns the policy in force: the stored override laid over the
// embedded default (ParseOverride) when it is valid, else the default. A
// broken override never
// replaces a working policy: the previous good one stays in force and the
// error is logged and kept for LastError.
type Loader struct {
	src     OverrideSource
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

// NewLoader returns a Loader reading overrides from src (nil: the default
// only).
func NewLoader(src OverrideSource, log *slog.Logger, opts ...LoaderOption) *Loader {
	l := &Loader{src: src, log: log, refresh: DefaultRefresh, now: time.Now}
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
	if l.src == nil || (!l.loadedAt.IsZero() && now.Sub(l.loadedAt) < l.refresh && l.refresh > 0) {
		return l.current
	}
	l.loadedAt = now
	l.lastErr = l.reload(ctx)
	return l.current
}

func (l *Loader) reload(ctx context.Context) error {
	raw, found, err := l.src.PolicyOverrideYAML(ctx)
	if err != nil {
		err = fmt.Errorf("triage: read the policy override: %w", err)
		l.log.WarnContext(ctx, "triage policy override unreadable; keeping the policy in force", "error", err, "policy_version", l.current.Version())
		return err
	}
	if !found {
		if l.hasRaw {
			l.log.InfoContext(ctx, "triage policy override removed; using the embedded default")
			l.current, l.hasRaw = Default(l.opts...), false
		}
		return nil
	}
	sum := sha256.Sum256(raw)
	if l.hasRaw && sum == l.rawSum {
		return nil
	}
	p, err := ParseOverride(raw, l.opts...)
	if err != nil {
		err = fmt.Errorf("triage: invalid policy override: %w", err)
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

// IsInvalid reports whether err is a policy validation error.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }
