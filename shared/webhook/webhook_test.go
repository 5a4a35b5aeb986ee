package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/jsdlq/jsdlq/shared/webhook"
)

// independentSign is the Standard Webhooks signature computed from the
// specification, without the package: base64(HMAC-SHA256(base64-decoded
// secret after "whsec_", "<id>.<unix seconds>.<body>")).
func independentSign(t *testing.T, secret, id string, unix int64, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("secret %q is not whsec_<base64>: %v", secret, err)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.%s", id, unix, body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestSignMatchesTheSpecification(t *testing.T) {
	// The specification's published example (standard-webhooks, spec
	// "Verifying webhook authenticity").
	const (
		specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		specID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		specBody   = `{"test": 2432232314}`
		specSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	ts := time.Unix(1614265330, 0)
	got, err := webhook.Sign(webhook.Secret(specSecret), specID, ts, []byte(specBody))
	if err != nil || got != specSig {
		t.Errorf("Sign(spec example) = %q, %v, want %q", got, err, specSig)
	}

	sec, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, body := range []string{`{"schema":"jsdlq.notification.v1"}`, "", "ünïcödé \x00 bytes"} {
		h := http.Header{}
		if err := webhook.SetHeaders(h, sec, "n-0123", now, []byte(body)); err != nil {
			t.Fatal(err)
		}
		want := independentSign(t, sec.Reveal(), "n-0123", now.Unix(), []byte(body))
		if got := h.Get(webhook.HeaderSignature); got != want {
			t.Errorf("SetHeaders(%q) signature = %q, want %q (independent)", body, got, want)
		}
		if got := h.Get(webhook.HeaderTimestamp); got != fmt.Sprint(now.Unix()) {
			t.Errorf("SetHeaders(%q) timestamp = %q, want %d", body, got, now.Unix())
		}
	}
}

func TestVerify(t *testing.T) {
	sec, _ := webhook.NewSecret()
	other, _ := webhook.NewSecret()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"n-1"}`)
	signed := func(ts time.Time) http.Header {
		h := http.Header{}
		h.Set(webhook.HeaderID, "n-1")
		h.Set(webhook.HeaderTimestamp, fmt.Sprint(ts.Unix()))
		h.Set(webhook.HeaderSignature, independentSign(t, sec.Reveal(), "n-1", ts.Unix(), body))
		return h
	}
	tests := []struct {
		name   string
		secret webhook.Secret
		header func() http.Header
		body   []byte
		want   error
	}{
		{"valid", sec, func() http.Header { return signed(now) }, body, nil},
		{"valid among several", sec, func() http.Header {
			h := signed(now)
			h.Set(webhook.HeaderSignature, "v1,AAAA v2,xyz "+h.Get(webhook.HeaderSignature))
			return h
		}, body, nil},
		{"tampered body", sec, func() http.Header { return signed(now) }, []byte(`{"id":"n-2"}`), webhook.ErrBadSignature},
		{"other secret", other, func() http.Header { return signed(now) }, body, webhook.ErrBadSignature},
		{"old timestamp", sec, func() http.Header { return signed(now.Add(-6 * time.Minute)) }, body, webhook.ErrBadTimestamp},
		{"future timestamp", sec, func() http.Header { return signed(now.Add(6 * time.Minute)) }, body, webhook.ErrBadTimestamp},
		{"timestamp rewritten", sec, func() http.Header {
			h := signed(now.Add(-time.Minute))
			h.Set(webhook.HeaderTimestamp, fmt.Sprint(now.Unix()))
			return h
		}, body, webhook.ErrBadSignature},
		{"id rewritten", sec, func() http.Header { h := signed(now); h.Set(webhook.HeaderID, "n-2"); return h }, body, webhook.ErrBadSignature},
		{"no signature", sec, func() http.Header { h := signed(now); h.Del(webhook.HeaderSignature); return h }, body, webhook.ErrNoSignature},
		{"garbled timestamp", sec, func() http.Header { h := signed(now); h.Set(webhook.HeaderTimestamp, "1e9"); return h }, body, webhook.ErrBadTimestamp},
		{"bad secret", "whsec_%%%", func() http.Header { return signed(now) }, body, webhook.ErrBadSecret},
	}
	for _, tt := range tests {
		id, err := webhook.Verify(tt.secret, tt.header(), tt.body, now, 0)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Verify() = %q, %v, want %v", tt.name, id, err, tt.want)
		}
		if tt.want == nil && id != "n-1" {
			t.Errorf("%s: Verify() id = %q, want n-1", tt.name, id)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	sec, _ := webhook.NewSecret()
	var logs strings.Builder
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "secret", sec)
	for _, s := range []string{fmt.Sprint(sec), fmt.Sprintf("%v %s %#v", sec, sec, sec), logs.String()} {
		if strings.Contains(s, sec.Reveal()[6:]) {
			t.Errorf("formatted secret %q shows the key", s)
		}
	}
	if _, err := webhook.ParseSecret(sec.Reveal()); err != nil {
		t.Errorf("ParseSecret(NewSecret()) = %v", err)
	}
	for _, bad := range []string{"", "whsec_", "sk_abc", "whsec_c2hvcnQ=", "whsec_!!!"} {
		if _, err := webhook.ParseSecret(bad); !errors.Is(err, webhook.ErrBadSecret) {
			t.Errorf("ParseSecret(%q) = %v, want ErrBadSecret", bad, err)
		}
	}
}

// A guard refuses what is not a public https endpoint unless local
// addresses are allowed, and never calls jsdlq's own URLs.
func TestGuard(t *testing.T) {
	own := []string{"https://jsdlq-replay-123.europe-west1.run.app", "https://console.example.com/", "http://127.0.0.1:8080/Replay", "https://34.1.2.3"}
	strict := webhook.NewGuard(webhook.WithOwnURLs(own...))
	local := webhook.NewGuard(webhook.WithLocal(true), webhook.WithOwnURLs(own...))
	tests := []struct {
		url               string
		strictOK, localOK bool
	}{
		{"https://hooks.example.com/jsdlq?token=abc", true, true},
		{"https://93.184.216.34:8443/hook", true, true},
		{"http://hooks.example.com/", false, true},
		{"https://127.0.0.1/", false, true},
		{"https://[::1]:9000/", false, true},
		{"https://localhost:9000/", false, true},
		{"https://api.localhost/", false, true},
		{"https://10.1.2.3/", false, true},
		{"https://192.168.0.1/", false, true},
		{"https://172.16.5.5/", false, true},
		{"https://169.254.169.254/computeMetadata/v1/", false, true},
		{"https://metadata.google.internal/", false, true},
		{"https://[fe80::1]/", false, true},
		{"https://[::ffff:127.0.0.1]/", false, true},
		{"https://100.64.0.1/", false, true},
		{"https://0.0.0.0/", false, true},
		{"https://0.1.2.3/", false, true},
		{"https://[64:ff9b::a9fe:a9fe]/", false, true}, // NAT64 of the metadata server
		{"https://[64:ff9b::5db8:d822]/", true, true},  // NAT64 of 93.184.216.34
		{"https://[64:ff9b:1::a00:1]/", false, true},
		{"https://[2002:a9fe:a9fe::1]/", false, true}, // 6to4 of the metadata server
		{"https://[::a9fe:a9fe]/", false, true},
		{"https://[::ffff:0:a9fe:a9fe]/", false, true},
		{"https://192.0.0.170/", false, true},
		{"https://198.18.0.1/", false, true},
		{"https://240.0.0.1/", false, true},
		{"https://255.255.255.255/", false, true},
		{"https://[fec0::1]/", false, true},
		{"https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", false, true}, // Teredo
		{"https://[2001:2::1]/", false, true},
		// Another spelling of an own port is still the own address; a port
		// spelt with leading zeros, or out of range, is refused outright.
		{"https://console.example.com:0443/x", false, false},
		{"https://hooks.example.com:00443/x", false, false},
		{"https://hooks.example.com:65536/x", false, false},
		{"https://hooks.example.com:0/x", false, false},
		// An own address given by IP, spelt another way: mapped, or the
		// NAT64 or 6to4 address that reaches it.
		{"https://34.1.2.3/", false, false},
		{"https://[::ffff:34.1.2.3]/", false, false},
		{"https://[64:ff9b::2201:203]/", false, false},
		{"https://[2002:2201:203::1]/", false, false},
		{"https://34.1.2.4/", true, true},
		// Within the limit as typed, beyond it once encoded (é is 2 bytes,
		// 6 characters escaped): stored and called encoded, so refused.
		{"https://hooks.example.com/" + strings.Repeat("é", 1000), false, false},
		{"https://jsdlq-replay-123.europe-west1.run.app/other", false, false},
		{"https://Console.Example.com:443/x", false, false},
		{"http://127.0.0.1:8080/Deliver", false, false},
		{"http://127.0.0.1:8081/hook", false, true},
		{"/relative/path", false, false},
		{"hooks.example.com/x", false, false},
		{"ftp://hooks.example.com/", false, false},
		{"https://user:pw@hooks.example.com/", false, false},
		{"https://hooks.example.com/#frag", false, false},
		{"https://hooks.example.com/ x", false, false},
		{" https://hooks.example.com/", false, false},
		{"https:///nohost", false, false},
		{"https://hooks.example.com/" + strings.Repeat("a", webhook.MaxURLLen), false, false},
		{"mailto:ops@example.com", false, false},
	}
	for _, tt := range tests {
		for _, g := range []struct {
			name  string
			guard *webhook.Guard
			ok    bool
		}{
			{"strict", strict, tt.strictOK}, {"local", local, tt.localOK},
		} {
			_, err := g.guard.Parse(tt.url)
			if (err == nil) != g.ok {
				t.Errorf("%s Parse(%q) = %v, want ok %v", g.name, tt.url, err, g.ok)
			}
			if err != nil && !errors.Is(err, webhook.ErrRefusedURL) {
				t.Errorf("%s Parse(%q) = %v, want ErrRefusedURL", g.name, tt.url, err)
			}
		}
	}
}

// fakeDNS is a DNS server on 127.0.0.1 answering every A question with
// addr, and a resolver that asks only it (no /etc/hosts name is used).
func fakeDNS(t *testing.T, addr netip.Addr) *net.Resolver {
	t.Helper()
	return zoneDNS(t, func(string) (netip.Addr, bool) { return addr, true })
}

// zoneDNS is fakeDNS answering A questions with what zone says of the name
// (without its trailing dot); a name it does not know does not exist.
func zoneDNS(t *testing.T, zone func(name string) (netip.Addr, bool)) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			addr, known := zone(strings.TrimSuffix(strings.ToLower(q.Name.String()), "."))
			rcode := dnsmessage.RCodeSuccess
			if !known {
				rcode = dnsmessage.RCodeNameError
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
			b.EnableCompression()
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if known && q.Type == dnsmessage.TypeA {
				_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}, dnsmessage.AResource{A: addr.As4()})
			}
			msg, err := b.Finish()
			if err == nil {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	}()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
}

// TestGuardChecksResolvedAddresses: a public-looking name that resolves to
// loopback is refused at registration, and a delivery to it never connects
// (the check runs on the address dialled, after resolution, so a name
// rebound between registration and delivery is caught too).
func TestGuardChecksResolvedAddresses(t *testing.T) {
	ctx := context.Background()
	loop := fakeDNS(t, netip.MustParseAddr("127.0.0.1"))
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	tlsConf := &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "example.com"}
	tlsConf.RootCAs.AddCert(srv.Certificate())

	strict := webhook.NewGuard(webhook.WithResolver(loop), webhook.WithTLSConfig(tlsConf))
	target := "https://hooks.example.net:" + port + "/hook"
	if _, err := strict.Check(ctx, target); !errors.Is(err, webhook.ErrRefusedURL) {
		t.Errorf("Check(%s resolving to 127.0.0.1) = %v, want ErrRefusedURL", target, err)
	}
	if _, err := strict.Parse(target); err != nil {
		t.Fatalf("Parse(%s) = %v: the name alone is acceptable", target, err)
	}
	resp, err := strict.Client(5*time.Second).Post(target, "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, webhook.ErrRefusedURL) || hits.Load() != 0 {
		t.Errorf("strict client POST %s = %v (%d requests arrived), want ErrRefusedURL and none", target, err, hits.Load())
	}
	// The same client in local mode reaches the receiver: the refusal
	// above was the address check, nothing else.
	local := webhook.NewGuard(webhook.WithLocal(true), webhook.WithResolver(loop), webhook.WithTLSConfig(tlsConf))
	resp, err = local.Client(5*time.Second).Post(target, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("local client POST %s = %v", target, err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Errorf("local client: %d requests arrived, want 1", hits.Load())
	}

	for _, ip := range []string{"127.0.0.1", "::1", "10.0.0.1", "169.254.169.254", "fd00::1", "::ffff:192.168.1.1"} {
		if err := strict.CheckIP(netip.MustParseAddr(ip)); !errors.Is(err, webhook.ErrRefusedURL) {
			t.Errorf("CheckIP(%s) = %v, want ErrRefusedURL", ip, err)
		}
	}
	for _, ip := range []string{"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"} {
		if err := strict.CheckIP(netip.MustParseAddr(ip)); err != nil {
			t.Errorf("CheckIP(%s) = %v, want allowed", ip, err)
		}
	}
}
