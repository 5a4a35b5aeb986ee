package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The bridge's credentials may not read the SECRET stream: NATS drops the
// request and reports a permission violation asynchronously. The bridge
// forwards the event with missing=true (permission_denied) instead of
// retrying forever, and still reads the streams it may read.
func TestStreamTheBridgeMayNotRead(t *testing.T) {
	t.Parallel()
	h, _ := restrictedHarness(t, "$JS.API.DIRECT.GET.SECRET", "$JS.API.STREAM.MSG.GET.SECRET", "$JS.API.STREAM.INFO.SECRET")
	s1 := deadLetter(t, h.js, "SECRET", "secret.x", []byte("classified"))
	o1 := deadLetter(t, h.js, "OPEN", "open.x", []byte("public"))
	h.sink.waitFor(2, 60*time.Second)
	e := h.sink.one(event.ID("SECRET", s1.Sequence))
	if !e.Message.Missing || e.Message.MissingReason != event.MissingPermissionDenied {
		t.Errorf("SECRET event message = %+v, want missing permission_denied", e.Message)
	}
	if o := h.sink.one(event.ID("OPEN", o1.Sequence)); string(o.Message.Data) != "public" {
		t.Errorf("OPEN event payload = %q, want public", o.Message.Data)
	}
}

// restrictedHarness starts a NATS server where the bridge's user may not
// publish to the deny subjects, and a bridge on it.
func restrictedHarness(t *testing.T, deny ...string) (*harness, context.Context) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "bridge", Password: "bridge", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	dial := func(t *testing.T, user string) *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, user))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := testenv.Context(t)
	h := &harness{bridgeConn: func(t *testing.T) *nats.Conn { return dial(t, "bridge") }}
	h.nc = dial(t, "admin")
	h.js, _ = jetstream.New(h.nc)
	h.ps, h.project = testenv.PubSub(t)
	var sub string
	h.topic, sub = newTopic(t, ctx, h.ps, h.project, "dlq-events")
	h.sink = collect(t, h.ps, sub)
	h.startBridge(t)
	return h, ctx
}

// Credentials granted the failure bucket's keys one by one
// ($JS.API.DIRECT.GET.KV_dlq_failures.>) but not its batch reads (the bare
// $JS.API.DIRECT.GET.KV_dlq_failures): the batch request is refused, and
// the bridge reads the records one key at a time, so the events still
// carry their failures.
func TestFailureBatchNotPermitted(t *testing.T) {
	t.Parallel()
	h, ctx := restrictedHarness(t, "$JS.API.DIRECT.GET.KV_dlq_failures")
	h.stopBridge()
	directStream(t, ctx, h.js, "WORK", "work.>")
	kv, err := h.js.KeyValue(ctx, "dlq_failures")
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	for seq := uint64(1); seq <= n; seq++ {
		publish(t, ctx, h.js, "work.x", []byte("task"))
		if _, err := kv.PutString(ctx, event.ID("WORK", seq), fmt.Sprintf(`{"code":"llm_provider_timeout","attempt":%d}`, seq)); err != nil {
			t.Fatal(err)
		}
		advise(t, ctx, h.js, "WORK", seq)
	}
	h.startBridge(t)
	h.sink.waitFor(n, 60*time.Second)
	for seq := uint64(1); seq <= n; seq++ {
		e := h.sink.one(event.ID("WORK", seq))
		if e.Failure == nil || e.Failure.Attempt != int(seq) {
			t.Errorf("WORK.%d failure = %+v, want attempt %d", seq, e.Failure, seq)
		}
	}
}
