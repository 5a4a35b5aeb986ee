package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// bareStormCeiling runs bareStormLoop at 4, 8 and 16 transactions at a
// time, n/3 entries each, and returns the best rate and its concurrency:
// the emulator's own best at the storm's work.
func bareStormCeiling(ctx context.Context, st *store.Store, template store.Entry, n int, progress io.Writer) (float64, int, error) {
	var best float64
	var at int
	for _, conc := range []int{4, 8, 16} {
		rate, err := bareStormLoop(ctx, st, template, max(n/3, 1), conc, progress)
		if err != nil {
			return 0, 0, err
		}
		if rate > best {
			best, at = rate, conc
		}
	}
	return best, at, nil
}

// bareStormLoop is the storm's Firestore work per entry as a bare loop,
// the second ceiling of the storm (newBareStormTx), n entries, conc at a
// time, on the same emulator. It does strictly less than classify (no
// push request, no event decoding, no policy), so it bounds what classify
// can reach on this Firestore.
func bareStormLoop(ctx context.Context, st *store.Store, template store.Entry, n, conc int, progress io.Writer) (float64, error) {
	tx, err := newBareStormTx(ctx, st, template)
	if err != nil {
		return 0, fmt.Errorf("bare storm loop: %w", err)
	}
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

// newBareStormTx returns the storm's Firestore work per entry without
// classify: the store's own Record of a copy of a storm entry (same fields,
// headers and payload; a tenant and ids of its own, scheduled as classify's
// decision was), so the reads and writes are exactly the storm's (after the
// first few, the breaker is open and known: create the entry, add it to a
// metric shard), with no push request, event decoding or policy.
//
// The first entries of the tenant, while its breaker is closed and then
// opening, are recorded one at a time before it returns, so the loop
// measures what the storm's entries nearly all are: held by a breaker
// known to be open.
func newBareStormTx(ctx context.Context, st *store.Store, template store.Entry) (func(context.Context) error, error) {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	stream := "BARE" + strings.ToUpper(run)
	var seq atomic.Uint64
	tx := func(ctx context.Context) error {
		e := template
		n := seq.Add(1)
		id, err := store.EntryID(event.ID(stream, n))
		if err != nil {
			return err
		}
		e.ID, e.EventID, e.RootID, e.Stream, e.StreamSeq = id, event.ID(stream, n), "", stream, int64(n)
		e.Tenant = "bare-" + run
		e.Status, e.TaskName, e.History, e.Kinds = store.Scheduled, id+"-r1", nil, nil
		e.Payload = append([]byte(nil), template.Payload...)
		// A conflict (several first entries of the tenant reading its
		// breaker at once) is retried, as Pub/Sub's redelivery retries
		// classify: Record of the same entry is create-or-merge.
		for attempt := 1; ; attempt++ {
			if _, err = st.Record(ctx, &e, "bare"); err == nil || attempt == 10 || ctx.Err() != nil {
				return err
			}
		}
	}
	for range 2 * store.DefaultBreaker.Threshold {
		if err := tx(ctx); err != nil {
			return nil, err
		}
	}
	return tx, nil
}
