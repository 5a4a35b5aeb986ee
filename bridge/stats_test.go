package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
)

// TestLogStats: the periodic stats line carries what Terraform's monitoring
// reads: jsonPayload.event = bridge_stats and a numeric lag.
func TestLogStats(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t)
	log, logs := testenv.Logger()
	bnc, _ := h.nats.Connect(t)
	b, err := bridge.New(bridge.Config{Topic: h.topic, Consumer: "dlq-bridge", MaxInFlight: 8, FetchTimeout: time.Second,
		Names: bridge.DefaultNames}, bnc, h.ps, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	go b.LogStats(ctx, 50*time.Millisecond)
	t.Cleanup(func() { cancel(); <-done })

	testenv.WaitFor(t, 20*time.Second, func() error {
		for _, l := range logs.Lines(`"event":"bridge_stats"`) {
			var line struct {
				Message string            `json:"message"`
				Lag     *uint64           `json:"lag"`
				ByStr   map[string]uint64 `json:"lag_by_stream"`
				Healthy bool              `json:"healthy"`
			}
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("stats line %q: %v", l, err)
			}
			if line.Lag != nil && line.Healthy && len(line.ByStr) == 2 {
				return nil
			}
		}
		return fmt.Errorf("no healthy bridge_stats line with lag for both streams; lines: %v", logs.Lines("bridge_stats"))
	})
}
