package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jsdlq/jsdlq/shared/clientopt"
)

// MintToken returns an ID token the stack's Cloud Tasks emulator signed for
// account, with audience: the local stack has no other issuer of
// Google-style tokens, so it creates a task on e.Queue aimed at a listener
// of its own and keeps the token the dispatch carries. The token lasts an
// hour (the emulator's lifetime, as Google's).
func (e Endpoints) MintToken(ctx context.Context, account, audience string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("mint a token: listen: %w", err)
	}
	got := make(chan string, 1)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			select {
			case got <- tok:
			default:
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	client, err := ctapi.NewClient(ctx, clientopt.CloudTasksOptions(e.CloudTasks)...)
	if err != nil {
		return "", fmt.Errorf("mint a token: cloud tasks client: %w", err)
	}
	defer client.Close()
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: e.Queue, Task: &cloudtaskspb.Task{
		ScheduleTime: timestamppb.Now(),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: "http://" + ln.Addr().String() + "/token", HttpMethod: cloudtaskspb.HttpMethod_POST,
			AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
				ServiceAccountEmail: account, Audience: audience,
			}},
		}},
	}})
	if err != nil {
		return "", fmt.Errorf("mint a token: create the task on %s: %w", e.Queue, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case tok := <-got:
		return tok, nil
	case <-ctx.Done():
		return "", errors.Join(errors.New("mint a token: the emulator dispatched no task to the listener"), ctx.Err())
	}
}
