// Package natsconn connects jsdlq components to NATS the same way everywhere:
// URL and optional credentials file from the environment (NATS_URL,
// NATS_CREDS), a client name that shows up in server monitoring, reconnects
// forever with jitter, and every connection state change logged. A long-running
// component never gives up on NATS; its health endpoint reports the state.
package natsconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Config says where and as whom to connect.
type Config struct {
	URL   string // one or more comma-separated URLs; default nats.DefaultURL
	Creds string // path to a .creds file; optional
	Name  string // client name, e.g. "jsdlq-bridge"
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
}

// Named is cfg for one component's connection: the client name server
// monitoring shows for it and the logger of its connection events.
func (cfg Config) Named(name string, log *slog.Logger) Config {
	cfg.Name, cfg.Logger = name, log
	return cfg
}

// ErrNotConnected is returned when the context ends before the first connect.
var ErrNotConnected = errors.New("natsconn: not connected")

// Connect dials NATS and waits until the connection is up or ctx ends. The
// connection retries the first connect and every reconnect forever; extra
// options are applied last and may override the defaults.
func Connect(ctx context.Context, cfg Config, extra ...nats.Option) (*nats.Conn, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	url := cfg.URL
	if url == "" {
		url = nats.DefaultURL
	}
	up := make(chan struct{}, 1)
	signal := func() {
		select {
		case up <- struct{}{}:
		default:
		}
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(500*time.Millisecond, time.Second),
		nats.PingInterval(20 * time.Second),
		nats.ConnectHandler(func(c *nats.Conn) {
			log.Info("nats connected", "url", c.ConnectedUrlRedacted(), "server", c.ConnectedServerName())
			signal()
		}),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			log.Warn("nats disconnected; reconnecting", "error", errString(err))
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted(), "reconnects", c.Stats().Reconnects)
		}),
		nats.ReconnectErrHandler(func(c *nats.Conn, err error) {
			log.Warn("nats reconnect attempt failed", "error", errString(err))
		}),
		nats.ClosedHandler(func(c *nats.Conn) {
			log.Info("nats connection closed")
		}),
		nats.ErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Error("nats async error", "subject", subj, "error", err)
		}),
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsconn: connect %s: %w", redact(url), err)
	}
	if nc.IsConnected() {
		return nc, nil
	}
	log.Warn("nats not reachable yet; retrying", "url", redact(url))
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, fmt.Errorf("%w to %s: %w", ErrNotConnected, redact(url), ctx.Err())
		case <-up:
		case <-tick.C:
		}
	}
	return nc, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// redact drops user information from URLs before they are logged.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := neturl.Parse(strings.TrimSpace(p))
		if err == nil && u.User != nil {
			u.User = neturl.User("redacted")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
