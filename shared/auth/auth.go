// Package auth verifies the callers of the replay and reconcile functions in
// code, on top of IAM (docs/configuration.md, AUTH_MODE): Cloud Tasks and
// Cloud Scheduler send an OIDC token for their service account; a request is
// let through only when the token is genuine, unexpired, issued by Google,
// meant for this function and carries an allowed, verified email.
//
// A missing or garbled token is 401 Unauthorized; a genuine token for another
// audience or account is 403 Forbidden. Locally, AUTH_MODE=emulator verifies
// the tokens the Cloud Tasks emulator signs against its JWKS, and
// AUTH_MODE=none (unit tests only) lets everything through; config refuses
// both when K_SERVICE is set.
package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/api/idtoken"

	"github.com/jsdlq/jsdlq/shared/auth/keyset"
	"github.com/jsdlq/jsdlq/shared/clientopt"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
)

var (
	// ErrUnauthenticated: no token, or not a genuine, current Google token (401).
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	// ErrForbidden: a genuine token, but not for this audience or account (403).
	ErrForbidden = errors.New("auth: forbidden")
	// ErrUnavailable: the keys to verify with could not be fetched (503, retry).
	ErrUnavailable = errors.New("auth: verification keys unavailable")
)

// googleIssuers are the issuers Google's ID tokens carry.
var googleIssuers = map[string]bool{"accounts.google.com": true, keyset.GoogleIssuer: true}

// Identity is the verified caller.
type Identity struct {
	Email string
	Mode  string
}

// claims is what the modes agree on after checking signature and expiry.
type claims struct {
	issuer, audience, email string
	emailVerified           bool
}

// Authenticator checks requests.
type Authenticator struct {
	mode     string
	audience string
	allowed  map[string]bool
	log      *slog.Logger
	verify   func(ctx context.Context, raw string) (claims, error)
}

// Option configures an Authenticator.
type Option func(*options)

type options struct {
	httpClient *http.Client
	jwksURL    string
	log        *slog.Logger
	now        func() time.Time
}

// WithHTTPClient sets the client that fetches Google's certificates (oidc)
// or the emulator's JWKS (emulator).
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpClient = c } }

// WithJWKSURL overrides the emulator JWKS address (by default the Cloud Tasks
// emulator's gRPC port + 1, as cmd/cloudtasks-emulator serves it).
func WithJWKSURL(u string) Option { return func(o *options) { o.jwksURL = u } }

// WithClock sets the time tokens are checked against in emulator mode
// (Google's validator in oidc mode always uses the real time).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLogger sets the logger for refused requests.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// New returns an Authenticator for cfg. emulatorHost is
// CLOUD_TASKS_EMULATOR_HOST (used in emulator mode).
func New(cfg config.Auth, emulatorHost string, opts ...Option) (*Authenticator, error) {
	o := options{log: obs.Discard()}
	for _, opt := range opts {
		opt(&o)
	}
	a := &Authenticator{mode: cfg.Mode, audience: cfg.Audience, allowed: map[string]bool{}, log: o.log}
	for _, e := range cfg.AllowedEmails {
		a.allowed[strings.ToLower(e)] = true
	}
	switch cfg.Mode {
	case config.AuthNone:
		return a, nil
	case config.AuthEmulator:
		url := o.jwksURL
		if url == "" {
			var err error
			if url, err = clientopt.CloudTasksJWKSURL(emulatorHost); err != nil {
				return nil, fmt.Errorf("auth: emulator mode: %w", err)
			}
		}
		var vopts []keyset.VerifierOption
		if o.httpClient != nil {
			vopts = append(vopts, keyset.WithVerifierHTTPClient(o.httpClient))
		}
		if o.now != nil {
			vopts = append(vopts, keyset.WithVerifierClock(o.now))
		}
		a.verify = emulatorVerifier(keyset.NewVerifier(url, vopts...), a.audience)
	case config.AuthOIDC, "":
		a.mode = config.AuthOIDC
		a.verify = googleVerifier(o.httpClient)
	default:
		return nil, fmt.Errorf("auth: unknown mode %q", cfg.Mode)
	}
	if a.audience == "" || len(a.allowed) == 0 {
		return nil, fmt.Errorf("auth: %s mode needs an audience and allowed emails", a.mode)
	}
	return a, nil
}

// emulatorVerifier checks signature, issuer, expiry and audience with the
// emulator's keys. A token refused only for its audience is verified again
// against its own audience: if that passes, it is genuine but meant for
// someone else (403), not forged (401).
func emulatorVerifier(v *keyset.Verifier, audience string) func(context.Context, string) (claims, error) {
	return func(ctx context.Context, raw string) (claims, error) {
		c, err := v.Verify(ctx, raw, audience)
		if err != nil && errors.Is(err, jwt.ErrTokenInvalidAudience) {
			var unverified keyset.IDTokenClaims
			if _, _, perr := jwt.NewParser().ParseUnverified(raw, &unverified); perr == nil && len(unverified.Audience) == 1 {
				if c2, err2 := v.Verify(ctx, raw, unverified.Audience[0]); err2 == nil {
					c, err = c2, nil
				}
			}
		}
		if err != nil {
			if errors.Is(err, keyset.ErrToken) {
				return claims{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
			}
			return claims{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		aud := ""
		if len(c.Audience) > 0 {
			aud = c.Audience[0]
		}
		return claims{issuer: c.Issuer, audience: aud, email: c.Email, emailVerified: c.EmailVerified}, nil
	}
}

// googleVerifier checks signature and expiry against Google's certificates;
// the validator (and its certificate cache) is built once, on first use.
func googleVerifier(hc *http.Client) func(context.Context, string) (claims, error) {
	validator := sync.OnceValues(func() (*idtoken.Validator, error) {
		var vo []idtoken.ClientOption
		if hc != nil {
			vo = append(vo, idtoken.WithHTTPClient(hc))
		}
		return idtoken.NewValidator(context.Background(), vo...)
	})
	return func(ctx context.Context, raw string) (claims, error) {
		v, err := validator()
		if err != nil {
			return claims{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		// An empty audience makes Validate check signature and expiry only.
		p, err := v.Validate(ctx, raw, "")
		if err != nil {
			if isFetchError(err) {
				return claims{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			return claims{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		email, _ := p.Claims["email"].(string)
		verified, _ := p.Claims["email_verified"].(bool)
		return claims{issuer: p.Issuer, audience: p.Audience, email: email, emailVerified: verified}, nil
	}
}

// isFetchError tells a failure to download Google's certificates (worth a
// retry) from a bad token.
func isFetchError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// Authenticate verifies the request's bearer token.
func (a *Authenticator) Authenticate(r *http.Request) (Identity, error) {
	if a.mode == config.AuthNone {
		return Identity{Mode: a.mode}, nil
	}
	h := r.Header.Get("Authorization")
	scheme, raw, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(raw) == "" {
		return Identity{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	c, err := a.verify(r.Context(), strings.TrimSpace(raw))
	if err != nil {
		return Identity{}, err
	}
	if !googleIssuers[c.issuer] {
		return Identity{}, fmt.Errorf("%w: issuer %q is not Google", ErrUnauthenticated, c.issuer)
	}
	if c.audience != a.audience {
		return Identity{}, fmt.Errorf("%w: token audience %q is not %q", ErrForbidden, c.audience, a.audience)
	}
	if !c.emailVerified || !a.allowed[strings.ToLower(c.email)] {
		return Identity{}, fmt.Errorf("%w: account %q is not allowed", ErrForbidden, c.email)
	}
	return Identity{Email: c.email, Mode: a.mode}, nil
}

// Middleware lets only authenticated requests reach next.
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.Authenticate(r)
		if err != nil {
			code := http.StatusUnauthorized
			switch {
			case errors.Is(err, ErrForbidden):
				code = http.StatusForbidden
			case errors.Is(err, ErrUnavailable):
				code = http.StatusServiceUnavailable
			}
			a.log.WarnContext(r.Context(), "request refused", "status", code, "error", err.Error(), "path", event.Wire(r.URL.Path))
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="jsdlq"`)
			}
			http.Error(w, http.StatusText(code), code)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

type identityKey struct{}

// FromContext returns the caller Middleware verified.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
