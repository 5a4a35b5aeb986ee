package obs

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// listen serves h with lim on a free loopback port until the test ends.
func listen(t *testing.T, h http.Handler, lim Limits) string {
	t.Helper()
	s, err := Listen("127.0.0.1", 0, h, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(time.Second) })
	return s.Addr()
}

// closedBy reports whether the server closes conn (a read ends with EOF or
// a reset) before within; it fails the test otherwise. The wait is an
// upper bound for a loaded machine, not a measured time.
func closedBy(t *testing.T, conn net.Conn, within time.Duration) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s", within)
	}
}

// A client that sends its request line and headers a byte at a time, or
// never finishes them (slow loris), is cut off at the header timeout
// instead of holding a connection and a goroutine for ever.
func TestSlowHeadersAreCutOff(t *testing.T) {
	reached := make(chan struct{}, 1)
	addr := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached <- struct{}{} }),
		Limits{ReadHeader: 100 * time.Millisecond, Read: 100 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")); err != nil {
		t.Fatal(err)
	}
	closedBy(t, conn, 30*time.Second)
	select {
	case <-reached:
		t.Error("the handler ran for a request whose headers never ended")
	default:
	}
}

// A body that never ends is cut off at the read timeout.
func TestSlowBodyIsCutOff(t *testing.T) {
	addr := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil {
			t.Error("the handler read a body that never ended")
		}
	}), Limits{ReadHeader: time.Second, Read: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npart")); err != nil {
		t.Fatal(err)
	}
	closedBy(t, conn, 30*time.Second)
}

// A handler past its deadline: its context ends (so its I/O stops) and
// the client gets a 503, whether or not the handler returns in time.
func TestHandlerPastItsDeadline(t *testing.T) {
	ended := make(chan error, 1)
	release := make(chan struct{})
	addr := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Deadline(); !ok {
			t.Error("the handler's context has no deadline")
		}
		<-r.Context().Done()
		ended <- r.Context().Err()
		<-release // a handler that ignores its context: the answer goes anyway
	}), Limits{Request: 200 * time.Millisecond})
	defer close(release)
	resp, err := http.Get("http://" + addr + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "deadline") {
		t.Errorf("GET /slow = %d %q, want 503 naming the deadline", resp.StatusCode, body)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("handler context ended with %v, want DeadlineExceeded", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context never ended")
	}
}

// A deadline the request carries already is kept when it is earlier: the
// server's bound only ever shortens it.
func TestBoundedKeepsAnEarlierDeadline(t *testing.T) {
	var got time.Duration
	h := Bounded(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := r.Context().Deadline()
		got = time.Until(d)
	}), time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	h.ServeHTTP(discard{}, req)
	if got > time.Minute {
		t.Errorf("deadline in %s, want the request's own (at most a minute)", got)
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}

// A well-behaved request on a kept-alive connection is served as before.
func TestBoundedServerServes(t *testing.T) {
	addr := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), Limits{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := 0; i < 2; i++ {
		if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "ok" {
			t.Errorf("request %d = %d %q, want 200 ok", i, resp.StatusCode, b)
		}
	}
}
