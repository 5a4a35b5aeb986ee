package natsconn_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/natsconn"
)

func TestConnectReconnectsAfterServerRestart(t *testing.T) {
	n := testenv.NewNATS(t)
	log, logs := testenv.Logger()
	nc, err := natsconn.Connect(testenv.Context(t), natsconn.Config{URL: n.URL, Name: "jsdlq-test", Logger: log})
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	defer nc.Close()
	n.Restart(t)
	// nats.go calls the reconnect handler (which logs) on its own goroutine
	// after the connection is back: wait for the line too, not only the
	// state.
	testenv.WaitFor(t, 30*time.Second, func() error {
		if nc.Stats().Reconnects == 0 || !nc.IsConnected() || len(logs.Lines("nats reconnected")) == 0 {
			return fmt.Errorf("client did not reconnect after a server restart; logs:\n%s", logs)
		}
		return nil
	})
	if err := nc.Publish("x", nil); err != nil {
		t.Fatalf("publish after reconnect = %v", err)
	}
	for _, want := range []string{"nats connected", "nats disconnected", "nats reconnected"} {
		if !strings.Contains(strings.Join(logs.Lines(""), "\n"), want) {
			t.Errorf("logs lack %q:\n%s", want, strings.Join(logs.Lines(""), "\n"))
		}
	}
}

func TestConnectWaitsForALateServer(t *testing.T) {
	// Reserve a port, then start nothing on it until after Connect began.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = natsconn.Connect(ctx, natsconn.Config{URL: "nats://user:secret@" + addr, Name: "late"})
	if !errors.Is(err, natsconn.ErrNotConnected) {
		t.Fatalf("Connect to nothing = %v, want ErrNotConnected", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("Connect error leaks the password: %v", err)
	}
}

func TestMain(m *testing.M) { testenv.Main(m) }

// A Lazy made while NATS is down fails its callers without remembering the
// failure, and serves them once NATS is up: a function instance started
// during a NATS outage recovers without a restart.
func TestLazyRecoversFromAFailedFirstConnect(t *testing.T) {
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ctx := testenv.Context(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"}}); err != nil {
		t.Fatal(err)
	}
	n.Shutdown()
	lazy := natsconn.NewLazy(natsconn.Config{URL: n.URL, Name: "lazy"})
	defer lazy.Close()
	down, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := lazy.PublishMsg(down, &nats.Msg{Subject: "agents.a.tasks.t", Data: []byte("x")}); err == nil {
		t.Fatal("PublishMsg() with NATS down = nil, want an error")
	}
	n.Restart(t)
	ack, err := lazy.PublishMsg(ctx, &nats.Msg{Subject: "agents.a.tasks.t", Data: []byte("x")})
	if err != nil {
		t.Fatalf("PublishMsg() after NATS came back = %v", err)
	}
	if ack.Stream != "TASKS" || ack.Sequence != 1 {
		t.Errorf("PublishMsg() ack = %+v, want TASKS seq 1", ack)
	}
}

// Named names one component's connection and leaves the shared
// configuration it came from as it was.
func TestNamed(t *testing.T) {
	shared := natsconn.Config{URL: "nats://127.0.0.1:1", Creds: "/run/nats.creds"}
	log := slog.New(slog.DiscardHandler)
	got := shared.Named("jsdlq-x", log)
	if want := (natsconn.Config{URL: shared.URL, Creds: shared.Creds, Name: "jsdlq-x", Logger: log}); got != want {
		t.Errorf("Named(jsdlq-x) = %+v, want %+v", got, want)
	}
	if shared.Name != "" || shared.Logger != nil {
		t.Errorf("Named(jsdlq-x) changed its receiver to %+v", shared)
	}
}
