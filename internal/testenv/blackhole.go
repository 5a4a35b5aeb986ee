package testenv

import (
	"context"
	"net"
	"sync"
	"testing"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BlackHole listens on a free loopback port, accepts every connection and
// never answers, until the test ends: a dependency that hangs. A request
// answered while it is the only backend never reached it (or would still
// be waiting). It returns the address.
func BlackHole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// BlackHoleFirestore is a Firestore client whose every call hangs (until
// its context ends) on a BlackHole.
func BlackHoleFirestore(t testing.TB) *firestore.Client {
	t.Helper()
	conn, err := grpc.NewClient(BlackHole(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// The connection given last wins over the emulator's, which the
	// client dials itself when FIRESTORE_EMULATOR_HOST is set.
	fs, err := firestore.NewClient(context.Background(), "black-hole", option.WithoutAuthentication(), option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(); conn.Close() })
	return fs
}
