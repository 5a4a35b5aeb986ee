package bridge

import (
	"context"
	"time"
)

// StatsEvent is the `event` field of the bridge's periodic stats log line;
// Terraform's monitoring module counts on it (log_events.bridge_stats): the
// bridge_lag metric extracts `lag` from it, and bridge_silent fires when the
// line stops.
const StatsEvent = "bridge_stats"

// DefaultStatsInterval is how often LogStats writes the line.
const DefaultStatsInterval = time.Minute

// LogStats writes one INFO line every interval until ctx ends: the messages
// waiting in the advisory and record streams for the bridge (`lag`, the sum;
// `lag_by_stream`), the counters so far and whether the bridge is healthy.
func (b *Bridge) LogStats(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultStatsInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.logStats(ctx)
	}
}

func (b *Bridge) logStats(ctx context.Context) {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	b.updateLag(ictx)
	cancel()
	b.m.mu.Lock()
	byStream := make(map[string]uint64, len(b.m.lag))
	var lag uint64
	for s, n := range b.m.lag {
		byStream[s] = n
		lag += n
	}
	b.m.mu.Unlock()
	ok, why := b.Healthy()
	c := b.Counts()
	b.log.InfoContext(ctx, "bridge stats", "event", StatsEvent, "lag", lag, "lag_by_stream", byStream,
		"forwarded", c.Forwarded, "failed", c.Failed, "rejected", c.Rejected, "in_flight", c.InFlight, "healthy", ok, "health", why)
}
