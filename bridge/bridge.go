// Package bridge forwards dead JetStream messages to Pub/Sub (docs/bridge.md):
// it reads consumer advisories (max deliveries, terminated) and agentkit's
// explicit DLQ records from their streams, turns each into one jsdlq.event.v1
// event (fetching the original message and the last recorded failure) and
// publishes it, acknowledging the JetStream message only after Pub/Sub
// confirmed the publish.
//
// Delivery is at least once: a crash between the Pub/Sub confirmation and the
// JetStream ack republishes the event with the same id, which every consumer
// downstream deduplicates on.
package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bridge forwards dead messages; build it with New, run it with Run.
type Bridge struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	ps    *pubsub.Client
	topic string
	pub   *pubsub.Publisher
	log   *slog.Logger
	m     *metrics

	direct    *directGets
	sources   *sourceReader
	failures  *failureReader // set by Run before the consumers start
	ready     atomic.Bool    // resources ensured, consumers running
	pubFailed atomic.Bool    // the last publish attempt failed
	lastTopic atomic.Int64
	cons      sync.Map // stream name → jetstream.Consumer
}

// New returns a bridge over a NATS connection and a Pub/Sub client. It
// installs an async error hook on nc to learn which streams the bridge's
// credentials may not read (NATS reports permission violations only there).
func New(cfg Config, nc *nats.Conn, ps *pubsub.Client, log *slog.Logger) (*Bridge, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bridge: jetstream: %w", err)
	}
	topic := cfg.Topic
	if !strings.HasPrefix(topic, "projects/") {
		topic = "projects/" + ps.Project() + "/topics/" + topic
	}
	b := &Bridge{cfg: cfg, nc: nc, js: js, ps: ps, topic: topic, log: log, m: newMetrics()}
	b.direct = newDirectGets(nc)
	b.sources = newSourceReader(js, b.direct, cfg.FetchTimeout, log)
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		b.sources.noteAsyncError(err)
		if prev != nil {
			prev(c, s, err)
		}
	})
	b.pub = ps.Publisher(topic)
	b.pub.PublishSettings.CountThreshold = 100
	b.pub.PublishSettings.DelayThreshold = 5 * time.Millisecond
	b.pub.PublishSettings.ByteThreshold = 5_000_000
	// A publish that cannot complete in this time is NAKed and retried from
	// JetStream, where the message waits safely.
	b.pub.PublishSettings.Timeout = cfg.PublishTimeout
	b.pub.PublishSettings.FlowControlSettings = pubsub.FlowControlSettings{
		MaxOutstandingMessages: cfg.MaxInFlight,
		MaxOutstandingBytes:    -1,
		LimitExceededBehavior:  pubsub.FlowControlBlock,
	}
	return b, nil
}

// Counts returns the bridge's counters.
func (b *Bridge) Counts() Counts { return b.m.snapshot() }

// Healthy reports whether the bridge is connected to NATS, has set up its
// resources and its last publish attempt succeeded.
func (b *Bridge) Healthy() (bool, string) {
	switch {
	case !b.nc.IsConnected():
		return false, "nats: " + b.nc.Status().String()
	case !b.ready.Load():
		return false, "starting"
	case b.pubFailed.Load():
		return false, "pubsub: last publish failed"
	}
	return true, "ok"
}

// Handler serves /healthz and /metrics.
func (b *Bridge) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := b.Healthy()
		if !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, why)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		b.updateLag(ctx)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		b.m.write(w)
	})
	return mux
}

func (b *Bridge) updateLag(ctx context.Context) {
	b.cons.Range(func(k, v any) bool {
		info, err := v.(jetstream.Consumer).Info(ctx)
		if err == nil {
			b.m.setLag(k.(string), info.NumPending+uint64(info.NumAckPending))
		}
		return true
	})
}
