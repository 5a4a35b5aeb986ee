package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// jsdlq's own addresses: what the guard never calls. They are compared as a
// dialler reaches them, by address and port, whatever the spelling of the
// URL: a host given as an address in any form (ParseHost), and the
// addresses an own name resolves to. A name is compared by name as well,
// because a public address an own name resolves to is not jsdlq's alone:
// run.app and cloudfunctions.net URLs resolve to Google's front ends,
// which serve every customer's services by name, so refusing those
// addresses would refuse every tenant endpoint hosted on Google Cloud. An
// own name's addresses are compared only when they are not public
// (loopback, private, link-local: the local stack, an internal load
// balancer); a dedicated public address is named as an address
// (WEBHOOK_DENY_URLS=https://34.1.2.3).
//
// An own service on this machine (loopback or unspecified address) is
// reached on its port through any loopback address and through 0.0.0.0,
// which Linux connects to the local host: those count as one address.

// Timings of the own addresses' resolution.
const (
	// ownTimeout bounds one resolution of the own names and the read of
	// the source, whatever the caller's deadline.
	ownTimeout = 3 * time.Second
	// ownRefresh is how long a resolution is used: a deployment's URLs
	// change rarely (a Terraform apply), and an instance lives shorter.
	ownRefresh = 10 * time.Minute
	// ownRetry is how soon a failed lookup or read is tried again.
	ownRetry = 30 * time.Second
)

// ErrOwnUnknown is a check that could not learn jsdlq's own addresses
// (their source did not answer): retry later, nothing was decided.
var ErrOwnUnknown = errors.New("webhook: jsdlq's own addresses are unknown for now")

// OwnURLSource reads more of jsdlq's own URLs at run time: the ones a
// deployment knows only once its services exist (Terraform writes them
// after creating the services whose environment cannot name them). No
// URLs and no error when there are none.
type OwnURLSource func(ctx context.Context) ([]string, error)

// ownSet is a set of own hosts and ports.
type ownSet struct {
	names map[string]bool         // "name:port"
	addrs map[netip.AddrPort]bool // an own address and port
	local map[uint16]bool         // ports of own services on this machine
}

func newOwnSet() ownSet {
	return ownSet{names: map[string]bool{}, addrs: map[netip.AddrPort]bool{}, local: map[uint16]bool{}}
}

// thisMachine: an address that connects to the local host.
func thisMachine(ip netip.Addr) bool { return ip.IsLoopback() || ip.IsUnspecified() }

// addAddr adds ip:port, and the IPv4 address a NAT64 or 6to4 ip reaches.
func (s ownSet) addAddr(ip netip.Addr, port uint16) {
	ip = ip.WithZone("").Unmap()
	if thisMachine(ip) {
		s.local[port] = true
	} else {
		s.addrs[netip.AddrPortFrom(ip, port)] = true
	}
	if v4, ok := embeddedIPv4(ip); ok {
		s.addAddr(v4, port)
	}
}

// hasAddr tells whether ip:port is in s, in any spelling.
func (s ownSet) hasAddr(ip netip.Addr, port uint16) bool {
	ip = ip.WithZone("").Unmap()
	if thisMachine(ip) && s.local[port] || s.addrs[netip.AddrPortFrom(ip, port)] {
		return true
	}
	if v4, ok := embeddedIPv4(ip); ok {
		return s.hasAddr(v4, port)
	}
	return false
}

func (s ownSet) clone() ownSet {
	c := newOwnSet()
	maps.Copy(c.names, s.names)
	maps.Copy(c.addrs, s.addrs)
	maps.Copy(c.local, s.local)
	return c
}

// hasHost tells whether h:port is in s: by name, or by address (a local
// name is loopback).
func (s ownSet) hasHost(h Host, port uint16) bool {
	if h.IsAddr() {
		return s.hasAddr(h.Addr, port)
	}
	if s.names[nameKey(h.Name, port)] {
		return true
	}
	if localName(h.Name) {
		for _, ip := range loopbacks {
			if s.hasAddr(ip, port) {
				return true
			}
		}
	}
	return false
}

func nameKey(name string, port uint16) string { return name + ":" + strconv.Itoa(int(port)) }

// localName is a name that is the local host by definition (RFC 6761):
// every resolver answers it with loopback, so it needs no lookup.
func localName(name string) bool { return name == "localhost" || strings.HasSuffix(name, ".localhost") }

// loopbacks are what a local name resolves to.
var loopbacks = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}

// urlPort is u's port as a number: the explicit one, else the scheme's
// default (80 for http, 443 for https). ok is false for a port that is
// not a number from 1 to 65535.
func urlPort(u *url.URL) (uint16, bool) {
	p := u.Port()
	if p == "" {
		switch strings.ToLower(u.Scheme) {
		case "http":
			return 80, true
		case "https":
			return 443, true
		}
		return 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint16(n), true
}

// ownURL is one configured own URL, parsed.
type ownURL struct {
	host Host
	port uint16
}

// parseOwnURLs parses a list of own URLs (each may itself be a
// comma-separated list); unparsable or empty ones are skipped.
func parseOwnURLs(urls []string) []ownURL {
	var out []ownURL
	for _, raw := range urls {
		for _, one := range strings.Split(raw, ",") {
			u, err := url.Parse(strings.TrimSpace(one))
			if err != nil || u.Host == "" {
				continue
			}
			h, err := ParseHost(u.Hostname())
			port, ok := urlPort(u)
			if err != nil || !ok {
				continue
			}
			out = append(out, ownURL{host: h, port: port})
		}
	}
	return out
}

// add adds the URLs' addresses and names to s; the names that need a
// lookup are returned.
func (s ownSet) add(urls []ownURL) (lookup []ownURL) {
	for _, o := range urls {
		switch {
		case o.host.IsAddr():
			s.addAddr(o.host.Addr, o.port)
		case localName(o.host.Name):
			s.names[nameKey(o.host.Name, o.port)] = true
			for _, ip := range loopbacks {
				s.addAddr(ip, o.port)
			}
		default:
			s.names[nameKey(o.host.Name, o.port)] = true
			lookup = append(lookup, o)
		}
	}
	return lookup
}

// owns holds the guard's own addresses: the configured ones, parsed once
// by NewGuard without the network, and, made on first use and refreshed,
// the source's URLs and the addresses of every own name.
type owns struct {
	static  ownSet
	names   []ownURL // configured names to resolve
	source  OwnURLSource
	mu      sync.Mutex
	dynamic ownSet    // the last resolution (nil maps until the first)
	fresh   time.Time // when the last complete resolution ends being used
	retry   time.Time // when an incomplete one is tried again
}

// newOwns parses the configured own URLs, without the network.
func newOwns(urls []string, source OwnURLSource) *owns {
	o := &owns{static: newOwnSet(), source: source}
	o.names = o.static.add(parseOwnURLs(urls))
	return o
}

// current returns the own set: the configured hosts and what resolving
// adds, done again when it is stale: the source is read and every own name
// looked up, together within ownTimeout. When the source fails the last
// set is used; without one nothing can be decided (ErrOwnUnknown). A
// failed read or lookup is tried again after ownRetry.
func (o *owns) current(ctx context.Context, r *net.Resolver) (ownSet, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if o.dynamic.names != nil && (now.Before(o.fresh) || now.Before(o.retry)) {
		return o.dynamic, nil
	}
	if o.dynamic.names == nil && now.Before(o.retry) {
		return ownSet{}, fmt.Errorf("%w: the last read failed; retrying after %s", ErrOwnUnknown, o.retry.Format(time.RFC3339))
	}
	ctx, cancel := context.WithTimeout(ctx, ownTimeout)
	defer cancel()
	set := o.static.clone()
	names := o.names
	if o.source != nil {
		urls, err := o.source(ctx)
		if err != nil {
			o.retry = now.Add(ownRetry)
			if o.dynamic.names != nil {
				return o.dynamic, nil
			}
			return ownSet{}, fmt.Errorf("%w: %v", ErrOwnUnknown, err)
		}
		names = append(set.add(parseOwnURLs(urls)), names...)
	}
	complete := true
	type answer struct {
		o     ownURL
		addrs []netip.Addr
		err   error
	}
	answers := make(chan answer, len(names))
	for _, n := range names {
		go func() {
			addrs, err := r.LookupNetIP(ctx, "ip", n.host.Name)
			answers <- answer{n, addrs, err}
		}()
	}
	for range names {
		a := <-answers
		if a.err != nil {
			complete = false
			continue
		}
		for _, ip := range a.addrs {
			if !publicAddr(ip) {
				set.addAddr(ip, a.o.port)
			}
		}
	}
	o.dynamic = set
	if complete {
		o.fresh = now.Add(ownRefresh)
	} else {
		o.fresh, o.retry = time.Time{}, now.Add(ownRetry)
	}
	return set, nil
}
