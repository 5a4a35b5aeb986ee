package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/webhook"
)

func TestParseHost(t *testing.T) {
	addr := func(s string, canonical bool) webhook.Host {
		return webhook.Host{Addr: netip.MustParseAddr(s), Canonical: canonical}
	}
	name := func(s string) webhook.Host { return webhook.Host{Name: s, Canonical: true} }
	tests := []struct {
		in   string
		want webhook.Host
		ok   bool
	}{
		{"127.0.0.1", addr("127.0.0.1", true), true},
		{"127.0.0.1.", addr("127.0.0.1", true), true},
		{"127.1", addr("127.0.0.1", false), true},
		{"127.0.1", addr("127.0.0.1", false), true},
		{"2130706433", addr("127.0.0.1", false), true},
		{"0x7f000001", addr("127.0.0.1", false), true},
		{"0X7F000001", addr("127.0.0.1", false), true},
		{"0177.0.0.1", addr("127.0.0.1", false), true},
		{"0x7f.1", addr("127.0.0.1", false), true},
		{"017700000001", addr("127.0.0.1", false), true},
		{"0", addr("0.0.0.0", false), true},
		{"１２７.０.０.１", addr("127.0.0.1", true), true}, // full-width digits map to ASCII
		{"::1", addr("::1", true), true},
		{"::ffff:127.0.0.1", addr("127.0.0.1", true), true},
		{"0:0:0:0:0:0:0:1", addr("::1", true), true},
		{"fe80::1%eth0", addr("fe80::1", true), true},
		{"FE80::1", addr("fe80::1", true), true},
		{"localhost", name("localhost"), true},
		{"LocalHost.", name("localhost"), true},
		{"ｌｏｃａｌｈｏｓｔ", name("localhost"), true},
		{"Hooks.Example.COM", name("hooks.example.com"), true},
		{"bücher.example", name("xn--bcher-kva.example"), true},
		{"my_host.example", name("my_host.example"), true}, // ASCII is dialled as written
		{"1.2.3.4.example", name("1.2.3.4.example"), true},
		{"0x7f000001.example", name("0x7f000001.example"), true},
		{"256.0.0.1", webhook.Host{}, false},
		{"1.2.3.4.5", webhook.Host{}, false},
		{"example.123", webhook.Host{}, false},
		{"08.0.0.1", webhook.Host{}, false}, // octal with an 8
		{"4294967296", webhook.Host{}, false},
		{"1.16777216", webhook.Host{}, false},
		{"example..com", webhook.Host{}, false},
		{"example.com..", webhook.Host{}, false},
		{".", webhook.Host{}, false},
		{"", webhook.Host{}, false},
		{"::ffff:127.1", webhook.Host{}, false},
		{"1.2.3.4:80", webhook.Host{}, false},
	}
	for _, tt := range tests {
		got, err := webhook.ParseHost(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseHost(%q) = %+v, %v, want %+v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// FuzzParseHost: whatever the input, a host that parses is stable (its
// String parses to itself, spelt canonically), a name is lower-case ASCII
// without a trailing dot, and a host Go reads as an address is that
// address in its canonical spelling.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "::1",
		"::ffff:127.0.0.1", "localhost.", "ＬＯＣＡＬＨＯＳＴ", "bücher.example", "1.2.3.4.5", "0x", "0.0x0.00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		h, err := webhook.ParseHost(in)
		if err != nil {
			return
		}
		if h.IsAddr() == (h.Name != "") {
			t.Fatalf("ParseHost(%q) = %+v: an address or a name, not both nor neither", in, h)
		}
		again, err := webhook.ParseHost(h.String())
		if err != nil || again.Addr != h.Addr || again.Name != h.Name || !again.Canonical {
			t.Fatalf("ParseHost(ParseHost(%q).String() = %q) = %+v, %v, want %+v canonical", in, h.String(), again, err, h)
		}
		if !h.IsAddr() {
			if !utf8.ValidString(h.Name) || strings.ToLower(h.Name) != h.Name || strings.HasSuffix(h.Name, ".") {
				t.Fatalf("ParseHost(%q).Name = %q, want lower case without a trailing dot", in, h.Name)
			}
			for i := range len(h.Name) {
				if h.Name[i] >= 0x80 {
					t.Fatalf("ParseHost(%q).Name = %q, want ASCII", in, h.Name)
				}
			}
		}
		if ip, err := netip.ParseAddr(strings.TrimSuffix(in, ".")); err == nil && !strings.Contains(in, "%") {
			if !h.IsAddr() || h.Addr != ip.Unmap() || !h.Canonical {
				t.Fatalf("ParseHost(%q) = %+v, want the address %s, canonical", in, h, ip.Unmap())
			}
		}
	})
}

// ownZone is the DNS of the own-address tests: an own name on loopback, a
// name an attacker points at jsdlq's own addresses, and the console's name
// on a shared front end that also serves a tenant's endpoint.
func ownZone(name string) (netip.Addr, bool) {
	a, ok := map[string]string{
		"own.example":           "127.0.0.1",
		"sneaky.example":        "127.0.0.1",
		"rebind.example":        "34.1.2.3",
		"console.example.com":   "34.9.9.9",
		"tenant-on-run.example": "34.9.9.9",
		"hooks.example":         "93.184.216.34",
	}[name]
	if !ok {
		return netip.Addr{}, false
	}
	return netip.MustParseAddr(a), true
}

// TestGuardOwnAddresses: every spelling of jsdlq's own addresses is
// refused, in local mode too (where loopback endpoints are otherwise
// allowed), by the registration check; honest endpoints pass, one on the
// same shared front end as an own name among them.
func TestGuardOwnAddresses(t *testing.T) {
	ctx := context.Background()
	dns := zoneDNS(t, ownZone)
	own := []string{"http://127.0.0.1:8080/Replay", "http://own.example:9000", "https://34.1.2.3", "https://console.example.com/"}
	local := webhook.NewGuard(webhook.WithLocal(true), webhook.WithOwnURLs(own...), webhook.WithResolver(dns))
	strict := webhook.NewGuard(webhook.WithOwnURLs(own...), webhook.WithResolver(dns))
	refusedOwn := []string{
		"http://127.0.0.1:8080/x",
		"http://localhost:8080/",
		"http://LOCALHOST:8080/",
		"http://localhost.:8080/",
		"http://api.localhost:8080/",
		"http://127.1:8080/",
		"http://127.0.1:8080/",
		"http://2130706433:8080/",
		"http://0x7f000001:8080/",
		"http://0177.0.0.1:8080/",
		"http://127.0.0.1.:8080/",
		"http://127.0.0.2:8080/", // another loopback address reaches a server on all of them
		"http://0.0.0.0:8080/",   // Linux connects the unspecified address to this machine
		"http://[::1]:8080/",
		"http://[::]:8080/",
		"http://[0:0:0:0:0:0:0:1]:8080/",
		"http://[::ffff:127.0.0.1]:8080/",
		"http://[::ffff:7f00:1]:8080/",
		"http://ｌｏｃａｌｈｏｓｔ:8080/", // full-width: the HTTP client maps it to localhost
		"http://１２７.０.０.１:8080/",
		"http://sneaky.example:8080/", // resolves to an own address
		"http://own.example:9000/",
		"http://OWN.Example.:9000/",
		"http://127.0.0.1:9000/", // own.example's address
		"http://localhost:9000/",
		"https://34.1.2.3/",
		"https://34.1.2.3:443/",
		"https://[::ffff:34.1.2.3]/",
		"https://[64:ff9b::2201:203]/",
		"https://rebind.example/", // resolves to an own address given as one
		"https://console.example.com/hook",
		"https://console.example.com:443/",
		"https://CONSOLE.example.COM./",
	}
	for _, raw := range refusedOwn {
		_, err := local.Check(ctx, raw)
		if !errors.Is(err, webhook.ErrRefusedURL) || !strings.Contains(err.Error(), "own address") {
			t.Errorf("local Check(%q) = %v, want refused as jsdlq's own address", raw, err)
		}
		if _, err := strict.Check(ctx, raw); !errors.Is(err, webhook.ErrRefusedURL) {
			t.Errorf("strict Check(%q) = %v, want ErrRefusedURL", raw, err)
		}
	}
	allowed := []struct {
		url           string
		local, strict bool
	}{
		{"https://hooks.example/jsdlq", true, true},
		{"https://hooks.example:8080/", true, true},
		// The console's name resolves to a shared front end: another name
		// there is another service.
		{"https://tenant-on-run.example/", true, true},
		{"https://34.9.9.9/", true, true},
		{"https://34.1.2.3:8443/", true, true},
		{"https://console.example.com:8443/", true, true},
		{"http://127.0.0.1:8081/hook", true, false},
		{"http://localhost:8081/hook", true, false},
		{"http://own.example:9001/", true, false},
		{"https://unknown.example/", true, true}, // not resolvable yet: delivery checks again
		// Outside own addresses, an address written in a form resolvers
		// disagree on is refused as such.
		{"http://127.1:8081/", false, false},
		{"https://1572395042/", false, false},
	}
	for _, tt := range allowed {
		for _, g := range []struct {
			name  string
			guard *webhook.Guard
			ok    bool
		}{{"local", local, tt.local}, {"strict", strict, tt.strict}} {
			if _, err := g.guard.Check(ctx, tt.url); (err == nil) != g.ok {
				t.Errorf("%s Check(%q) = %v, want ok %v", g.name, tt.url, err, g.ok)
			}
		}
	}
}

// TestGuardOwnURLSource: the source's URLs are own addresses from its
// first successful read on, read once and cached; a failed read decides
// nothing (ErrOwnUnknown) and is not repeated at once.
func TestGuardOwnURLSource(t *testing.T) {
	ctx := context.Background()
	var reads atomic.Int32
	fail := true
	g := webhook.NewGuard(webhook.WithResolver(zoneDNS(t, ownZone)), webhook.WithOwnURLSource(func(context.Context) ([]string, error) {
		reads.Add(1)
		if fail {
			return nil, errors.New("firestore unavailable")
		}
		return []string{"https://jsdlq-deliver-abc123-ew.a.run.app", "https://34.5.6.7"}, nil
	}))
	for range 2 {
		if _, err := g.Check(ctx, "https://hooks.example/"); !errors.Is(err, webhook.ErrOwnUnknown) {
			t.Errorf("Check(honest) with a failing source = %v, want ErrOwnUnknown", err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("failing source read %d times in a row, want 1 (retried after a pause)", n)
	}

	fail = false
	g = webhook.NewGuard(webhook.WithResolver(zoneDNS(t, ownZone)), webhook.WithOwnURLSource(func(context.Context) ([]string, error) {
		reads.Add(1)
		return []string{"https://jsdlq-deliver-abc123-ew.a.run.app", "https://34.5.6.7"}, nil
	}))
	reads.Store(0)
	for _, raw := range []string{"https://jsdlq-deliver-abc123-ew.a.run.app/x", "https://JSDLQ-deliver-abc123-ew.a.run.app./", "https://34.5.6.7/"} {
		if _, err := g.Check(ctx, raw); !errors.Is(err, webhook.ErrRefusedURL) {
			t.Errorf("Check(%q) = %v, want refused (the source names it)", raw, err)
		}
	}
	if _, err := g.Check(ctx, "https://hooks.example/"); err != nil {
		t.Errorf("Check(honest) = %v", err)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("source read %d times for 4 checks, want 1", n)
	}
	// Parse has no network: it knows the configured URLs only.
	if _, err := g.Parse("https://34.5.6.7/"); err != nil {
		t.Errorf("Parse(source URL) = %v, want accepted (Check refuses it)", err)
	}
}

// TestClientRefusesOwnAddressAtConnection: a name that passed registration
// and is then pointed at an own address is refused on the address dialled,
// and nothing reaches the own service.
func TestClientRefusesOwnAddressAtConnection(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	g := webhook.NewGuard(webhook.WithLocal(true), webhook.WithOwnURLs(srv.URL), webhook.WithResolver(zoneDNS(t, ownZone)))
	for _, target := range []string{"http://sneaky.example:" + port + "/hook", "http://localhost:" + port + "/"} {
		resp, err := g.Client(5*time.Second).Post(target, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, webhook.ErrRefusedURL) || hits.Load() != 0 {
			t.Errorf("local client POST %s = %v (%d requests arrived), want ErrRefusedURL and none", target, err, hits.Load())
		}
	}
	// Not an own address: the same server under another guard is reached.
	other := webhook.NewGuard(webhook.WithLocal(true), webhook.WithResolver(zoneDNS(t, ownZone)))
	resp, err := other.Client(5*time.Second).Post("http://sneaky.example:"+port+"/hook", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("POST without own addresses: %v", err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Errorf("%d requests arrived, want 1", hits.Load())
	}
}
