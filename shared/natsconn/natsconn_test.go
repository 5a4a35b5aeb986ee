package natsconn_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/testenv"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestConnectReconnectsAfterServerRestart(t *testing.T) {
	n := testenv.NewNATS(t)
	var logs syncBuf
	nc, err := natsconn.Connect(testenv.Context(t), natsconn.Config{URL: n.URL, Name: "jsdlq-test",
		Logger: obs.NewLogger(&logs)})
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	defer nc.Close()
	n.Restart(t)
	deadline := time.Now().Add(30 * time.Second)
	for nc.Reconnects == 0 || !nc.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatalf("client did not reconnect after a server restart; logs:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := nc.Publish("x", nil); err != nil {
		t.Fatalf("publish after reconnect = %v", err)
	}
	for _, want := range []string{"nats connected", "nats disconnected", "nats reconnected"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
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
