package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrRefusedURL is an endpoint jsdlq will not call.
var ErrRefusedURL = errors.New("webhook: endpoint refused")

// MaxURLLen bounds an endpoint URL.
const MaxURLLen = 2048

// Guard decides which endpoints jsdlq may call. Its zero value is strict
// (https to public addresses only, no own URLs known); NewGuard adds what
// the configuration knows.
type Guard struct {
	local    bool
	ownURLs  []string
	source   OwnURLSource
	own      *owns
	resolver *net.Resolver
	tls      *tls.Config
}

// GuardOption configures NewGuard.
type GuardOption func(*Guard)

// WithLocal allows http and loopback, private and link-local addresses:
// the local stack only, where every endpoint is on this machine.
func WithLocal(on bool) GuardOption { return func(g *Guard) { g.local = on } }

// WithOwnURLs names jsdlq's own URLs (console, functions, push endpoint):
// an endpoint that reaches the same host and port is refused, so a
// notification never calls back into jsdlq. Each may be a comma-separated
// list; unparsable or empty ones are skipped.
func WithOwnURLs(urls ...string) GuardOption {
	return func(g *Guard) { g.ownURLs = append(g.ownURLs, urls...) }
}

// WithOwnURLSource adds the own URLs source reads on first use (and again
// every few minutes): a deployment's URLs that no environment can name.
func WithOwnURLSource(source OwnURLSource) GuardOption {
	return func(g *Guard) { g.source = source }
}

// WithResolver replaces net.DefaultResolver, for the registration check,
// the deliveries' connections and the own names alike.
func WithResolver(r *net.Resolver) GuardOption { return func(g *Guard) { g.resolver = r } }

// WithTLSConfig sets the client's TLS configuration (tests trust their
// receiver's certificate with it).
func WithTLSConfig(c *tls.Config) GuardOption { return func(g *Guard) { g.tls = c } }

// NewGuard returns a Guard. It parses the own URLs; their names are
// resolved on first use, never here.
func NewGuard(opts ...GuardOption) *Guard {
	g := &Guard{}
	for _, o := range opts {
		o(g)
	}
	g.own = newOwns(g.ownURLs, g.source)
	return g
}

// owns returns g's own addresses (none for a zero Guard).
func (g *Guard) owns() *owns {
	if g == nil || g.own == nil {
		return newOwns(nil, nil)
	}
	return g.own
}

func (g *Guard) lookup() *net.Resolver {
	if g != nil && g.resolver != nil {
		return g.resolver
	}
	return net.DefaultResolver
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefusedURL, fmt.Sprintf(format, args...))
}

// Parse checks an endpoint URL without the network: absolute, https (or
// http in local mode), no user info or fragment, not one of jsdlq's own
// hosts, and, when the host is an address or a name that is local by
// definition, an address the guard allows. A refusal names the URL's host,
// never the URL: its path or query may hold the tenant's own token, and a
// refusal at delivery is recorded and told to the operators
// (webhook_disabled).
func (g *Guard) Parse(raw string) (*url.URL, error) {
	if g == nil {
		g = &Guard{}
	}
	if len(raw) > MaxURLLen || strings.TrimSpace(raw) != raw || strings.ContainsFunc(raw, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
		return nil, refused("the URL must be at most %d characters without spaces or control characters", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return nil, refused("not an absolute URL (https://host/…)")
	}
	// What is stored and called is the URL as Go writes it, in which each
	// byte outside ASCII takes three characters.
	if len(u.String()) > MaxURLLen {
		return nil, refused("the URL must be at most %d characters once encoded (each character outside ASCII takes 3 a byte)", MaxURLLen)
	}
	// A port the way a person writes one: another spelling of the same
	// port (":0443") would pass the own-address check below.
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 || strconv.FormatUint(n, 10) != p {
			return nil, refused("%s: the port must be a number from 1 to 65535, without leading zeros", u.Host)
		}
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
	case scheme == "http" && g.local:
	default:
		return nil, refused("%s: only https endpoints are allowed", u.Host)
	}
	if u.User != nil || u.Fragment != "" {
		return nil, refused("%s: no user information or fragment", u.Hostname())
	}
	h, err := ParseHost(u.Hostname())
	if err != nil {
		return nil, refused("%q: the host is neither a name nor an address", u.Hostname())
	}
	port, _ := urlPort(u)
	if g.owns().static.hasHost(h, port) {
		return nil, refused("%s is jsdlq's own address", u.Host)
	}
	if h.IsAddr() {
		if !h.Canonical {
			return nil, refused("%s writes the address %s in a form resolvers read differently; write it in dotted decimal", u.Hostname(), h.Addr)
		}
		if err := g.CheckIP(h.Addr); err != nil {
			return nil, err
		}
	} else if !g.local && (localName(h.Name) || h.Name == "metadata.google.internal" || strings.HasSuffix(h.Name, ".internal")) {
		return nil, refused("%s is a local or internal host", u.Hostname())
	}
	return u, nil
}

// publicAddr tells whether ip is an address a strict guard calls.
func publicAddr(ip netip.Addr) bool { return (*Guard)(nil).CheckIP(ip) == nil }

// notPublic are the special-purpose ranges (IANA's registries) that the
// netip predicates do not cover and that no public endpoint uses.
var notPublic = func() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{
		"0.0.0.0/8",       // "this network"
		"100.64.0.0/10",   // shared address space (RFC 6598), private in all but name
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"240.0.0.0/4",     // reserved, and the broadcast address
		"::/96",           // IPv4-compatible (deprecated)
		"::ffff:0:0:0/96", // IPv4-translated (SIIT)
		"64:ff9b:1::/48",  // local-use IPv4/IPv6 translation (RFC 8215)
		"100::/64",        // discard-only
		"2001::/32",       // Teredo (its IPv4 addresses are obfuscated)
		"2001:2::/48",     // benchmarking
		"2001:db8::/32",   // documentation
		"fec0::/10",       // site-local (deprecated)
	} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}()

// Addresses that carry an IPv4 address a translator or tunnel reaches:
// NAT64's well-known prefix (DNS64 gives public hosts such addresses, so it
// is checked, not refused) and 6to4.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// CheckIP refuses, outside local mode, addresses that are not public:
// loopback, private, link-local (the metadata server among them),
// unspecified, multicast, shared and the other special-purpose ranges, and
// IPv6 addresses whose embedded IPv4 address (NAT64, 6to4) is one of these.
func (g *Guard) CheckIP(ip netip.Addr) error {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return refused("no address")
	}
	if g != nil && g.local {
		return nil
	}
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return refused("address %s is not public", ip)
	}
	for _, p := range notPublic {
		if p.Contains(ip) {
			return refused("address %s is not public (%s)", ip, p)
		}
	}
	if v4, ok := embeddedIPv4(ip); ok {
		if err := g.CheckIP(v4); err != nil {
			return refused("address %s reaches %s, which is not public", ip, v4)
		}
	}
	return nil
}

// embeddedIPv4 is the IPv4 address a NAT64 (well-known prefix) or 6to4
// address reaches.
func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	b := ip.As16()
	switch {
	case !ip.Is6():
		return netip.Addr{}, false
	case nat64.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// Check is the full check, at registration and before each delivery:
// Parse, then jsdlq's own addresses as they are now (the source's URLs,
// the addresses own names resolve to) by name and by address, then every
// address the host resolves to must be allowed. A name that does not
// resolve yet is accepted (delivery checks again on every connection, and
// fails while it does not resolve); one that resolves to a refused address
// is not. ErrOwnUnknown means the own addresses could not be learnt: retry.
func (g *Guard) Check(ctx context.Context, raw string) (*url.URL, error) {
	u, err := g.Parse(raw)
	if err != nil {
		return nil, err
	}
	own, err := g.owns().current(ctx, g.lookup())
	if err != nil {
		return nil, err
	}
	h, _ := ParseHost(u.Hostname())
	port, _ := urlPort(u)
	if own.hasHost(h, port) {
		return nil, refused("%s is jsdlq's own address", u.Host)
	}
	if h.IsAddr() || localName(h.Name) {
		return u, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.lookup().LookupNetIP(ctx, "ip", h.Name)
	if err != nil {
		return u, nil
	}
	for _, ip := range addrs {
		if err := g.checkAddr(own, ip, port); err != nil {
			return nil, fmt.Errorf("%w (%s resolves to it)", err, h.Name)
		}
	}
	return u, nil
}

// checkAddr is the check of one address a connection would go to: not
// jsdlq's own, and allowed by CheckIP.
func (g *Guard) checkAddr(own ownSet, ip netip.Addr, port uint16) error {
	if own.hasAddr(ip, port) {
		return refused("%s is jsdlq's own address", netip.AddrPortFrom(ip.WithZone("").Unmap(), port))
	}
	return g.CheckIP(ip)
}

// Client returns the HTTP client deliveries use: each connection's address,
// after DNS resolution, goes through CheckIP (so a name that resolves to a
// private address, or is rebound to one, is refused at the moment it
// matters), redirects are not followed (a 3xx is a failure: a redirect
// could lead anywhere), no proxy from the environment is used, and every
// request ends after timeout.
func (g *Guard) Client(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, Resolver: g.resolver, ControlContext: func(ctx context.Context, _, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return refused("address %q", address)
		}
		own, err := g.owns().current(ctx, g.lookup())
		if err != nil {
			return err
		}
		return g.checkAddr(own, ap.Addr(), ap.Port())
	}}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSClientConfig:       g.tls,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}
