package testenv

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MintToken has a Cloud Tasks emulator mint a genuine OIDC token for
// audience, signed as serviceAccount, the way it does on every dispatch, and
// returns the Authorization header a capturing server received. queue must
// exist. Tests replay or forge requests with it without weakening the
// functions' authentication.
func MintToken(t testing.TB, client *ctapi.Client, queue, serviceAccount, audience string) string {
	t.Helper()
	var mu sync.Mutex
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Get("Authorization")
		mu.Unlock()
	}))
	defer srv.Close()
	_, err := client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: &cloudtaskspb.Task{
		ScheduleTime: timestamppb.Now(),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: srv.URL, HttpMethod: cloudtaskspb.HttpMethod_POST,
			AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
				ServiceAccountEmail: serviceAccount, Audience: audience,
			}},
		}},
	}})
	if err != nil {
		t.Fatalf("testenv: create token-capturing task in %s: %v", queue, err)
	}
	WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(got, "Bearer ") {
			return errors.New("no bearer token captured from the emulator's dispatch yet")
		}
		return nil
	})
	return got
}

// SignJWT signs claims with key under key id kid, RS256 for an RSA key and
// ES256 for a P-256 one, as Google signs ID tokens and IAP its assertions:
// tests of the verifiers forge tokens with keys and claims of their choice.
func SignJWT(t testing.TB, key crypto.Signer, kid string, claims jwt.Claims) string {
	t.Helper()
	var method jwt.SigningMethod
	switch key.(type) {
	case *rsa.PrivateKey:
		method = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		method = jwt.SigningMethodES256
	default:
		t.Fatalf("testenv: SignJWT with a %T key", key)
	}
	tok := jwt.NewWithClaims(method, claims)
	tok.Header["kid"] = kid
	signed, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("testenv: sign token: %v", err)
	}
	return signed
}
