package testenv

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
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
