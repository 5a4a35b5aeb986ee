package console_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/shared/store"
)

// rebound serves a console on a loopback port (opts get the port) and
// returns an operator's browser on it and the browser of a page whose name
// evil.example was rebound to that port by its DNS: its requests reach the
// console with Host evil.example:<port>, as same-origin requests of
// evil.example.
func rebound(t *testing.T, e *env, opts func(port int) []console.Option) (local, evil *browser, port int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = ln.Addr().(*net.TCPAddr).Port
	srv := httptest.NewUnstartedServer(console.New(e.st, e.op, console.LocalAuth("ops@example.com"), opts(port)...).Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	local = newBrowser(t, srv.URL)
	evil = newBrowser(t, "http://evil.example:"+strconv.Itoa(port))
	evil.c.Transport = &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, ln.Addr().String())
	}}
	return local, evil, port
}

// localHosts is the console as cmd/console runs it locally: the Host check
// with the loopback defaults of its port.
func localHosts(port int) []console.Option {
	return []console.Option{console.WithHosts(console.Env{Port: port}.Hosts("127.0.0.1")...)}
}

// TestHostCheckRefusesDNSRebinding: a page whose name was rebound to the
// local console's address gets 421 for every page and form, with or
// without a valid CSRF token, and changes nothing; the same attack on a
// console without the check discards an entry (what the check stops).
func TestHostCheckRefusesDNSRebinding(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	e.seed(t, "acme", "TASKS.1", store.Scheduled, `{"a":1}`)
	e.seed(t, "acme", "TASKS.2", store.Scheduled, `{"a":2}`)

	_, open, _ := rebound(t, e, func(int) []console.Option { return nil })
	if code, _ := open.get("/entries/TASKS.2"); code != http.StatusOK || open.csrf == "" {
		t.Fatalf("unchecked console: rebound GET = %d, token %q", code, open.csrf)
	}
	if code, _, _ := open.post("/entries/TASKS.2/discard", url.Values{"csrf": {open.csrf}, "reason": {"rebound"}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Fatalf("unchecked console: rebound discard = %d, want 303 (the attack the check stops)", code)
	}

	local, evil, _ := rebound(t, e, localHosts)
	before := e.snapshot(t)
	for _, path := range []string{"/", "/entries", "/entries/TASKS.1", "/tenants", "/api/v1/tenants/acme/entries"} {
		if code, body := evil.get(path); code != http.StatusMisdirectedRequest || evil.csrf != "" {
			t.Errorf("rebound GET %s = %d, token %q, want 421 and no token\n%s", path, code, evil.csrf, body)
		}
	}
	for _, name := range []string{"without a token", "with a token"} {
		token := ""
		if name == "with a token" {
			// A valid pair, read by the operator's own browser: the
			// rebound page cannot read it, but even if it could, the
			// request is refused before any handler.
			if code, _ := local.get("/entries/TASKS.1"); code != http.StatusOK || local.csrf == "" {
				t.Fatalf("operator GET = %d, token %q", code, local.csrf)
			}
			token = local.csrf
			u, _ := url.Parse(evil.base)
			evil.c.Jar.SetCookies(u, []*http.Cookie{{Name: "jsdlq_csrf", Value: token}})
		}
		if code, _, _ := evil.post("/entries/TASKS.1/discard", url.Values{"csrf": {token}, "reason": {"rebound"}}); code != http.StatusMisdirectedRequest {
			t.Errorf("rebound discard %s = %d, want 421", name, code)
		}
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("refused requests changed the store (-before +after):\n%s", diff)
	}
	// The operator's own browser, at the console's address, still acts.
	if code, _, _ := local.post("/entries/TASKS.1/discard", url.Values{"csrf": {local.csrf}, "reason": {"operator"}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Errorf("operator discard = %d, want 303", code)
	}
}

// TestHostCheck drives Host values at a console answering at its local
// defaults (the loopback addresses of its port) and at a configured URL.
func TestHostCheck(t *testing.T) {
	e := newEnv(t, console.LocalAuth("ops@example.com"))
	_, _, port := rebound(t, e, localHosts)
	p := strconv.Itoa(port)
	base := "http://127.0.0.1:" + p
	tests := []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + p, http.StatusOK},
		{"localhost:" + p, http.StatusOK},
		{"LOCALHOST.:" + p, http.StatusOK},
		{"[::1]:" + p, http.StatusOK},
		{"127.1:" + p, http.StatusOK}, // the same address, spelt another way
		{"127.0.0.1:0" + p, http.StatusOK},
		{"evil.example:" + p, http.StatusMisdirectedRequest},
		{"127.0.0.1", http.StatusMisdirectedRequest}, // port 80
		{"127.0.0.1:1", http.StatusMisdirectedRequest},
		{"127.0.0.2:" + p, http.StatusMisdirectedRequest},
		{"localhost.evil.example:" + p, http.StatusMisdirectedRequest},
		{"[::ffff:7f00:2]:" + p, http.StatusMisdirectedRequest},
	}
	for _, tt := range tests {
		for _, path := range []string{"/entries", "/api/v1/tenants/acme/entries"} {
			req, _ := http.NewRequest(http.MethodGet, base+path, nil)
			req.Host = tt.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.StatusCode
			if tt.want == http.StatusOK && got == http.StatusMisdirectedRequest || tt.want != http.StatusOK && got != tt.want {
				t.Errorf("GET %s with Host %q = %d, want %d", path, tt.host, got, tt.want)
			}
		}
	}
	// Health checks name the container, not the service.
	req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Host = "10.0.0.7:8080"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz with a container's Host = %v %v, want 200", resp, err)
	}

	// A console on Cloud Run answers at its configured URL only.
	hosts := console.Env{URLs: []string{"https://jsdlq-console-123.europe-west1.run.app"}, Port: 8080}.Hosts("")
	_, _, cport := rebound(t, e, func(int) []console.Option { return []console.Option{console.WithHosts(hosts...)} })
	cbase := "http://127.0.0.1:" + strconv.Itoa(cport)
	for host, want := range map[string]int{
		"jsdlq-console-123.europe-west1.run.app":     http.StatusOK,
		"jsdlq-console-123.europe-west1.run.app:443": http.StatusOK,
		"JSDLQ-console-123.europe-west1.run.app.":    http.StatusOK,
		"jsdlq-console-123.europe-west1.run.app:80":  http.StatusMisdirectedRequest,
		"127.0.0.1:" + strconv.Itoa(cport):           http.StatusMisdirectedRequest,
		"jsdlq-console-abc-ew.a.run.app":             http.StatusMisdirectedRequest,
	} {
		req, _ := http.NewRequest(http.MethodGet, cbase+"/entries", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.StatusCode; (want == http.StatusOK) != (got != http.StatusMisdirectedRequest) {
			t.Errorf("configured console: GET /entries with Host %q = %d, want %d", host, got, want)
		}
	}
}
