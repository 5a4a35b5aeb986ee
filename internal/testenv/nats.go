package testenv

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS is an embedded nats-server with JetStream on a loopback port, with its
// store in a temporary directory. It is stopped when the test ends.
type NATS struct {
	URL  string
	opts server.Options
	srv  *server.Server
}

// NATSOption configures the server NewNATS starts.
type NATSOption func(*server.Options)

// WithPublishDenied adds user (its password is its name), who may do all a
// client may do except publish to the subjects deny (wildcards allowed). A
// JetStream API request to a denied subject never reaches JetStream: the
// server sends the client a permissions violation and the request gets no
// answer, as with a production user whose permissions leave out a stream.
// Connections without credentials stay unrestricted.
func WithPublishDenied(user string, deny ...string) NATSOption {
	return func(o *server.Options) {
		if o.NoAuthUser == "" {
			// Once there are users, a connection without credentials is
			// refused unless it is taken for one of them.
			o.NoAuthUser = "jsdlq-testenv-admin"
			o.Users = append(o.Users, &server.User{Username: o.NoAuthUser, Password: o.NoAuthUser})
		}
		o.Users = append(o.Users, &server.User{Username: user, Password: user,
			Permissions: &server.Permissions{Publish: &server.SubjectPermission{Deny: deny}}})
	}
}

// NewNATS starts a JetStream server for this test alone.
func NewNATS(t testing.TB, opts ...NATSOption) *NATS {
	t.Helper()
	n := &NATS{opts: server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoSigs:    true,
		NoLog:     true,
		// Keep server-side limits close to a default deployment.
		MaxPayload: 1 << 20,
	}}
	for _, o := range opts {
		o(&n.opts)
	}
	n.start(t)
	t.Cleanup(n.Shutdown)
	return n
}

func (n *NATS) start(t testing.TB) {
	t.Helper()
	srv, err := server.NewServer(&n.opts)
	if err != nil {
		t.Fatalf("testenv: nats-server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatalf("testenv: nats-server not ready")
	}
	n.srv = srv
	n.URL = srv.ClientURL()
	// A restart must come back on the same port so clients reconnect.
	if a, ok := srv.Addr().(*net.TCPAddr); ok {
		n.opts.Port = a.Port
	}
}

// Server is the embedded server, for tests that inspect it.
func (n *NATS) Server() *server.Server { return n.srv }

// Shutdown stops the server (idempotent).
func (n *NATS) Shutdown() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Restart stops the server and starts it again on the same port and store,
// as a nats-server restart in production would.
func (n *NATS) Restart(t testing.TB) {
	t.Helper()
	n.Shutdown()
	n.start(t)
}

// Connect returns a connection (closed when the test ends) and its JetStream.
func (n *NATS) Connect(t testing.TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(n.URL, opts...)
	if err != nil {
		t.Fatalf("testenv: nats connect %s: %v", n.URL, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testenv: jetstream: %v", err)
	}
	return nc, js
}
