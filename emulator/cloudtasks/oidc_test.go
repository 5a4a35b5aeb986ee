package cloudtasks_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/golang-jwt/jwt/v5"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/auth/keyset"
)

func TestOIDCToken(t *testing.T) {
	t.Parallel()
	e := startEmu(t)
	ctx := context.Background()
	tg := newTarget(t, nil)
	q := e.queue(t, "oidc", nil, nil)
	const sa = "replay-invoker@test-project.iam.gserviceaccount.com"
	withOIDC := func(url, aud string) *cloudtaskspb.Task {
		tk := httpTask("", url)
		tk.GetHttpRequest().AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{ServiceAccountEmail: sa, Audience: aud}}
		return tk
	}
	e.task(t, q, withOIDC(tg.URL+"/default-aud?a=1", ""))
	e.task(t, q, withOIDC(tg.URL+"/explicit-aud", "https://replay.example.com"))
	testenv.WaitUntil(t, 10*time.Second, "two dispatches", func() bool { return tg.count() == 2 })

	v := keyset.NewVerifier(e.JWKSURL)
	for _, h := range tg.snapshot() {
		raw, ok := strings.CutPrefix(h.header.Get("Authorization"), "Bearer ")
		if !ok {
			t.Fatalf("Authorization = %q, want a Bearer token", h.header.Get("Authorization"))
		}
		aud := tg.URL + "/default-aud?a=1" // the target URL when no audience is set
		if h.path == "/explicit-aud" {
			aud = "https://replay.example.com"
		}
		claims, err := v.Verify(ctx, raw, aud)
		if err != nil {
			t.Fatalf("Verify(%s, aud %q) = %v", h.path, aud, err)
		}
		if claims.Email != sa || !claims.EmailVerified || claims.Issuer != keyset.GoogleIssuer || claims.Subject == "" {
			t.Errorf("claims = %+v, want email %s verified, iss %s, a subject", claims, sa, keyset.GoogleIssuer)
		}
		if life := claims.ExpiresAt.Sub(claims.IssuedAt.Time); life != time.Hour {
			t.Errorf("exp - iat = %v, want 1h", life)
		}
		hdr := decodeSegment(t, raw, 0)
		if hdr["alg"] != "RS256" || hdr["kid"] == "" || hdr["kid"] == nil {
			t.Errorf("token header = %v, want RS256 with a kid", hdr)
		}

		// Wrong audience, expired, tampered: all refused.
		if _, err := v.Verify(ctx, raw, "https://other.example.com"); !errors.Is(err, keyset.ErrToken) {
			t.Errorf("Verify(wrong audience) = %v, want ErrToken", err)
		}
		late := keyset.NewVerifier(e.JWKSURL, keyset.WithVerifierClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
		if _, err := late.Verify(ctx, raw, aud); !errors.Is(err, keyset.ErrToken) {
			t.Errorf("Verify(2h later) = %v, want ErrToken (expired)", err)
		}
		parts := strings.Split(raw, ".")
		forgedClaims := decodeSegment(t, raw, 1)
		forgedClaims["email"] = "attacker@example.com"
		b, _ := json.Marshal(forgedClaims)
		tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
		if _, err := v.Verify(ctx, tampered, aud); !errors.Is(err, keyset.ErrToken) {
			t.Errorf("Verify(tampered claims) = %v, want ErrToken", err)
		}
	}

	// A token signed by another key under the emulator's kid is refused.
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	raw0, _ := strings.CutPrefix(tg.snapshot()[0].header.Get("Authorization"), "Bearer ")
	kid, _ := decodeSegment(t, raw0, 0)["kid"].(string)
	if kid == "" {
		t.Fatalf("the emulator's token %q names no kid", raw0)
	}
	signed := testenv.SignJWT(t, other, kid, jwt.MapClaims{
		"iss": keyset.GoogleIssuer, "aud": "x", "email": sa, "email_verified": true,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	})
	if _, err := v.Verify(ctx, signed, "x"); !errors.Is(err, keyset.ErrToken) {
		t.Errorf("Verify(foreign key) = %v, want ErrToken", err)
	}
	// Unsigned ("none") tokens never pass.
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"x"}`)) + "." + strings.Split(raw0, ".")[1] + "."
	if _, err := v.Verify(ctx, none, tg.URL+"/default-aud?a=1"); !errors.Is(err, keyset.ErrToken) {
		t.Errorf("Verify(alg none) = %v, want ErrToken", err)
	}
	if _, err := v.Verify(ctx, "not-a-jwt", "x"); !errors.Is(err, keyset.ErrToken) {
		t.Errorf("Verify(garbage) = %v, want ErrToken", err)
	}
}

func decodeSegment(t *testing.T, raw string, i int) map[string]any {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts, want 3", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[i])
	if err != nil {
		t.Fatalf("decode token segment %d: %v", i, err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode token segment %d: %v", i, err)
	}
	return m
}
