package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/firestore"
)

// bareStormCeiling runs bareStormLoop at 4, 8 and 16 transactions at a
// time, n/3 entries each, and returns the best rate and its concurrency:
// the emulator's own best at the storm's work.
func bareStormCeiling(ctx context.Context, fs *firestore.Client, n int, progress io.Writer) (float64, int, error) {
	var best float64
	var at int
	for _, conc := range []int{4, 8, 16} {
		rate, err := bareStormLoop(ctx, fs, max(n/3, 1), conc, progress)
		if err != nil {
			return 0, 0, err
		}
		if rate > best {
			best, at = rate, conc
		}
	}
	return best, at, nil
}

// bareStormLoop is the storm's Firestore work per entry written as a bare
// loop, the second ceiling of the storm: what classify's transaction does
// for an entry held by an open breaker (the storm's common case, known
// open, so the breaker document is neither read nor written), one
// transaction that creates an entry-sized document and adds to one of 8
// metric shards of the hour, n of them, conc at a time, on the same
// emulator, in collections of its own. It does strictly less than classify
// (no event decoding, no policy, no push request), so it bounds what
// classify can reach on this Firestore.
func bareStormLoop(ctx context.Context, fs *firestore.Client, n, conc int, progress io.Writer) (float64, error) {
	tx := newBareStormTx(fs)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := tx(ctx); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, fmt.Errorf("bare storm loop: %w", firstErr)
	}
	rate := float64(n) / time.Since(start).Seconds()
	fmt.Fprintf(progress, "    a bare Firestore loop of the storm's transaction (create + shard), %d at a time: %.0f/s\n", conc, rate)
	return rate, nil
}

// newBareStormTx returns the storm's transaction per entry, bare: create an
// entry-sized document (a 512-byte payload, the fields an entry has) and
// add to one of 8 metric shards of the hour, in collections of its own.
func newBareStormTx(fs *firestore.Client) func(context.Context) error {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	payload := make([]byte, 512)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	hour := time.Now().UTC().Format("2006-01-02T15")
	var seq atomic.Int64
	return func(ctx context.Context) error {
		id := fmt.Sprintf("BARE.%s.%d", run, seq.Add(1))
		h := fnv.New32a()
		h.Write([]byte(id))
		shard := fs.Collection("bare-storm-metrics").Doc(hour).Collection("shards").Doc(strconv.Itoa(int(h.Sum32() % 8)))
		return fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
			now := time.Now().UTC()
			if err := tx.Create(fs.Collection("bare-storm-entries").Doc(id), map[string]any{
				"id": id, "tenant": "bare", "agent": "backend", "kind": "terminated", "status": "held",
				"category": "transient", "reason_code": "llm_provider_timeout", "action": "replay",
				"payload": payload, "payload_size": len(payload), "created_at": now, "updated_at": now,
				"history": []map[string]any{{"at": now, "to": "held", "by": "classify", "note": "tenant breaker open"}},
			}); err != nil {
				return err
			}
			return tx.Set(shard, map[string]any{"total": firestore.Increment(1),
				"by_tenant": map[string]any{"bare": firestore.Increment(1)}}, firestore.MergeAll)
		})
	}
}
