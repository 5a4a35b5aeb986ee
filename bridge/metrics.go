package bridge

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// metrics are the bridge's Prometheus series, written in the text exposition
// format by hand: five series do not justify a client library.
type metrics struct {
	mu        sync.Mutex
	forwarded map[string]uint64 // by kind
	failed    map[string]uint64 // by reason
	rejected  map[string]uint64 // by reason
	lag       map[string]uint64 // by stream
	inFlight  atomic.Int64
}

func newMetrics() *metrics {
	return &metrics{forwarded: map[string]uint64{}, failed: map[string]uint64{},
		rejected: map[string]uint64{}, lag: map[string]uint64{}}
}

func (m *metrics) inc(series map[string]uint64, label string) {
	m.mu.Lock()
	series[label]++
	m.mu.Unlock()
}

func (m *metrics) setLag(stream string, n uint64) {
	m.mu.Lock()
	m.lag[stream] = n
	m.mu.Unlock()
}

// Counts is a snapshot of the counters, for tests and the benchmark.
type Counts struct {
	Forwarded map[string]uint64
	Failed    map[string]uint64
	Rejected  map[string]uint64
	InFlight  int64
}

func (m *metrics) snapshot() Counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp := func(in map[string]uint64) map[string]uint64 {
		out := make(map[string]uint64, len(in))
		for k, v := range in {
			out[k] = v
		}
		return out
	}
	return Counts{Forwarded: cp(m.forwarded), Failed: cp(m.failed), Rejected: cp(m.rejected), InFlight: m.inFlight.Load()}
}

func (m *metrics) write(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	family := func(name, help, typ, label string, series map[string]uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
		for _, k := range slices.Sorted(maps.Keys(series)) {
			fmt.Fprintf(w, "%s{%s=%q} %d\n", name, label, k, series[k])
		}
	}
	family("jsdlq_bridge_forwarded_total", "Events confirmed by Pub/Sub, by kind.", "counter", "kind", m.forwarded)
	family("jsdlq_bridge_failed_total", "Attempts that failed and were retried (NAK with delay), by reason.", "counter", "reason", m.failed)
	family("jsdlq_bridge_rejected_total", "Inputs that can never be forwarded, logged and acknowledged, by reason.", "counter", "reason", m.rejected)
	fmt.Fprintf(w, "# HELP jsdlq_bridge_in_flight Messages being forwarded now.\n# TYPE jsdlq_bridge_in_flight gauge\njsdlq_bridge_in_flight %d\n", m.inFlight.Load())
	family("jsdlq_bridge_consumer_lag", "Messages not yet forwarded (pending plus unacknowledged) per stream.", "gauge", "stream", m.lag)
}
