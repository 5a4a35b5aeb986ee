package console

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// The Host check: the console answers only requests addressed to one of
// its own URLs. Without it a page of another site can rebind its name to
// the console's address (DNS rebinding): the browser then sends that
// page's requests to the console as same-origin requests of the other
// site, the console hands that origin a CSRF cookie and a form token it
// can read, and in local mode every request acts as the operator. The
// name the browser used still arrives in Host, so a Host that is not the
// console's own is refused (421 Misdirected Request) before any handler,
// with or without a valid token. /healthz is exempt: platform probes name
// the container, not the service, and it tells nothing.

// hostPort is a normalised host and port as they arrive in Host.
type hostPort struct {
	host string
	port string // "" when the request names none
}

// WithHosts makes the console answer only requests whose Host is the host
// and port of one of urls (a URL without a port is also reached by a Host
// without one). Without it every Host is answered (tests).
func WithHosts(urls ...string) Option {
	return func(s *Server) {
		s.hosts = map[hostPort]bool{}
		for _, raw := range urls {
			if u, err := parseOwnURL(raw); err == nil {
				h, _ := webhook.ParseHost(u.Hostname())
				port := u.Port()
				if port == "" || port == defaultPort(u.Scheme) {
					s.hosts[hostPort{h.String(), ""}] = true
					port = defaultPort(u.Scheme)
				}
				s.hosts[hostPort{h.String(), port}] = true
			}
		}
	}
}

func defaultPort(scheme string) string {
	if strings.EqualFold(scheme, "https") {
		return "443"
	}
	return "80"
}

// parseOwnURL checks one of the console's URLs: http or https, a host in
// a form ParseHost reads, a port without leading zeros, nothing after the
// path.
func parseOwnURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case err != nil:
		return nil, err
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "", u.User != nil, u.RawQuery != "", u.Fragment != "":
		return nil, fmt.Errorf("%q is not an http(s) URL of a host", raw)
	}
	if _, err := webhook.ParseHost(u.Hostname()); err != nil {
		return nil, fmt.Errorf("%q: the host is neither a name nor an address", raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 || strconv.FormatUint(n, 10) != p {
			return nil, fmt.Errorf("%q: the port must be a number from 1 to 65535", raw)
		}
	}
	return u, nil
}

var errBadHost = errors.New("bad Host")

// requestHost normalises a request's Host.
func requestHost(raw string) (hostPort, error) {
	host, port, err := net.SplitHostPort(raw)
	if err != nil {
		// No port: a name, an IPv4 address or a bracketed IPv6 one.
		host, port = strings.TrimSuffix(strings.TrimPrefix(raw, "["), "]"), ""
	}
	h, err := webhook.ParseHost(host)
	if err != nil {
		return hostPort{}, errBadHost
	}
	if port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return hostPort{}, errBadHost
		} else {
			port = strconv.FormatUint(n, 10)
		}
	}
	return hostPort{h.String(), port}, nil
}

// checkHost refuses a request whose Host is not one of s.hosts.
func (s *Server) checkHost(next http.Handler) http.Handler {
	if s.hosts == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if hp, err := requestHost(r.Host); err != nil || !s.hosts[hp] {
			s.log.WarnContext(r.Context(), "console: request for another host refused", "event", "host_refused",
				"host", event.Wire(r.Host), "path", event.Wire(r.URL.Path))
			http.Error(w, "421 misdirected request: this is not the console's address", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
