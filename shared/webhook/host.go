package webhook

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// Host is a URL's host as a dialler reaches it: either an address or a
// name, never both. Two spellings of one host give the same Host.
type Host struct {
	// Addr is the address when the host is one (unmapped, without zone).
	Addr netip.Addr
	// Name is the host name in its ASCII form (IDNA, lower case, no
	// trailing dot) when it is not an address.
	Name string
	// Canonical is false for an IPv4 address written another way than
	// dotted decimal (true for every name) (2130706433, 0x7f000001, 0177.0.0.1, 127.1): resolvers
	// disagree on those (getaddrinfo reads them as addresses, Go's resolver
	// as names).
	Canonical bool
}

// IsAddr tells whether h is an address.
func (h Host) IsAddr() bool { return h.Addr.IsValid() }

// String is the address or the name.
func (h Host) String() string {
	if h.IsAddr() {
		return h.Addr.String()
	}
	return h.Name
}

// errHost is a host that is neither a name nor an address.
var errHost = errors.New("not a host name or address")

// ParseHost normalises a URL's host (url.URL.Hostname: no brackets, no
// port) the way the HTTP client that calls it does and the way WHATWG URL
// parsers do: IDNA mapping first (full-width letters and digits, upper
// case), one trailing dot dropped, then a host whose last label is a number
// (decimal, or hexadecimal with 0x) is an IPv4 address in any of the forms
// inet_aton accepts (127.1, 2130706433, 0x7f000001, 0177.0.0.1) or is
// malformed. IPv6 addresses lose their zone and an IPv4-mapped one is its
// IPv4 address.
func ParseHost(host string) (Host, error) {
	if host == "" {
		return Host{}, errHost
	}
	if strings.Contains(host, ":") {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() {
			return Host{}, errHost
		}
		return Host{Addr: ip.WithZone("").Unmap(), Canonical: true}, nil
	}
	// What net/http's transport does to a host before it dials: a name
	// outside ASCII is mapped by IDNA, one in ASCII is dialled as written.
	name := host
	if !isASCII(name) {
		var err error
		if name, err = idna.Lookup.ToASCII(name); err != nil {
			return Host{}, errHost
		}
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return Host{}, errHost
	}
	labels := strings.Split(name, ".")
	if !endsInNumber(labels[len(labels)-1]) {
		return Host{Name: name, Canonical: true}, nil
	}
	ip, ok := legacyIPv4(labels)
	if !ok {
		return Host{}, errHost
	}
	canonical := false
	if dotted, err := netip.ParseAddr(name); err == nil && dotted.Is4() {
		canonical = true
	}
	return Host{Addr: ip, Canonical: canonical}, nil
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// endsInNumber is WHATWG's test of a host's last label: digits, or 0x and
// hexadecimal digits. Such a host is an IPv4 address or nothing.
func endsInNumber(label string) bool {
	if rest, ok := strings.CutPrefix(label, "0x"); ok {
		return strings.Trim(rest, "0123456789abcdef") == ""
	}
	return label != "" && strings.Trim(label, "0123456789") == ""
}

// ipv4Part is one part of an inet_aton address: decimal, octal with a
// leading 0, hexadecimal with 0x.
func ipv4Part(s string) (uint64, bool) {
	base := 10
	switch {
	case s == "":
		return 0, false
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		base, s = 16, s[2:]
		if s == "" {
			return 0, true // "0x" is zero, as WHATWG and inet_aton read it
		}
	case len(s) > 1 && s[0] == '0':
		base, s = 8, s[1:]
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || base == 16 && (c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')) {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return 0, false // out of range, or an 8 or 9 in octal
	}
	return n, true
}

// legacyIPv4 reads 1 to 4 parts as inet_aton does: every part but the last
// is one byte, the last fills the bytes left.
func legacyIPv4(parts []string) (netip.Addr, bool) {
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := ipv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		last := i == len(parts)-1
		if !last && n > 0xff || last && n >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		if last {
			v = v<<(8*(4-i)) | n
		} else {
			v = v<<8 | n
		}
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}
