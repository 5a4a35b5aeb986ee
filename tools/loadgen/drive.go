package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// driver offers dead messages to the pipeline the way JetStream does: the
// original task sits in the work stream and a terminated advisory pointing
// at it lands on the advisory subject the bridge's stream captures. The
// advisory is published by the driver rather than provoked through a
// consumer's TERM so that the offered rate is exact and the clock starts
// when the advisory exists; its JSON is the one nats-server emits.
type driver struct {
	js       jetstream.JetStream
	fs       *firestore.Client
	store    *store.Store
	progress io.Writer
}

const workStream = event.DefaultWorkStream

func (d *driver) setup(ctx context.Context) error {
	_, err := d.js.CreateStream(ctx, jetstream.StreamConfig{Name: workStream, Subjects: []string{"agents.>"},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, AllowDirect: true, Duplicates: time.Hour})
	if err != nil {
		return fmt.Errorf("create stream %s: %w", workStream, err)
	}
	return nil
}

// originals publishes n tasks and returns their stream sequences.
func (d *driver) originals(ctx context.Context, n int, tenant func(i int) string) ([]uint64, error) {
	payload := make([]byte, 512)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	futures := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		if i > 0 && i%1000 == 0 {
			if err := d.acked(ctx); err != nil {
				return nil, err
			}
		}
		m := nats.NewMsg("agents.backend.tasks.code_review")
		m.Data = payload
		m.Header.Set("X-Tenant-ID", tenant(i))
		m.Header.Set("X-Task-ID", fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i))
		f, err := d.js.PublishMsgAsync(m)
		if err != nil {
			return nil, fmt.Errorf("publish original %d: %w", i, err)
		}
		futures = append(futures, f)
	}
	seqs := make([]uint64, n)
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			return nil, fmt.Errorf("publish original %d: %w", i, err)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return seqs, nil
}

// offer publishes one terminated advisory per sequence, rate per second
// (0: as fast as the client goes), and returns when each was sent.
func (d *driver) offer(ctx context.Context, seqs []uint64, reason string, rate float64) ([]time.Time, error) {
	sent := make([]time.Time, len(seqs))
	start := time.Now()
	for i, seq := range seqs {
		if rate == 0 && i > 0 && i%1000 == 0 {
			if err := d.acked(ctx); err != nil {
				return nil, err
			}
		}
		if rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		now := time.Now().UTC()
		adv, err := json.Marshal(map[string]any{"type": event.AdvisoryTerminated, "id": fmt.Sprint("adv-", seq),
			"timestamp": now, "stream": workStream, "consumer": "worker", "consumer_seq": seq, "stream_seq": seq,
			"deliveries": 1, "reason": reason, "domain": ""})
		if err != nil {
			return nil, err
		}
		if _, err := d.js.PublishAsync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+workStream+".worker", adv); err != nil {
			return nil, fmt.Errorf("publish advisory %d: %w", seq, err)
		}
		sent[i] = now
	}
	if err := d.acked(ctx); err != nil {
		return nil, err
	}
	return sent, nil
}

// acked waits until every async publish so far is acknowledged. Past the
// client's limit of pending async publishes it stalls and errors out, so
// the drivers wait for the outstanding acks every thousand messages.
func (d *driver) acked(ctx context.Context) error {
	select {
	case <-d.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await polls Firestore until every sequence has its entry or timeout
// passes, and returns each entry's commit time (zero when it never came).
// The commit time is Firestore's own, so the latency includes the creating
// transaction.
func (d *driver) await(ctx context.Context, label string, seqs []uint64, timeout time.Duration) ([]time.Time, error) {
	created := make([]time.Time, len(seqs))
	missing := make([]int, len(seqs))
	for i := range missing {
		missing[i] = i
	}
	deadline := time.Now().Add(timeout)
	lastReport := time.Now()
	for len(missing) > 0 && time.Now().Before(deadline) {
		var still []int
		for chunk := range slices.Chunk(missing, 300) {
			refs := make([]*firestore.DocumentRef, len(chunk))
			for j, i := range chunk {
				refs[j] = d.fs.Collection(store.FailureLog).Doc(event.ID(workStream, seqs[i]))
			}
			snaps, err := d.fs.GetAll(ctx, refs)
			if err != nil {
				return nil, fmt.Errorf("read entries: %w", err)
			}
			for j, snap := range snaps {
				if snap.Exists() {
					created[chunk[j]] = snap.CreateTime
				} else {
					still = append(still, chunk[j])
				}
			}
		}
		missing = still
		if time.Since(lastReport) > 5*time.Second {
			fmt.Fprintf(d.progress, "    %s: %d/%d entries\n", label, len(seqs)-len(missing), len(seqs))
			lastReport = time.Now()
		}
		if len(missing) > 0 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	return created, nil
}

// entries reads the entries of seqs that exist.
func (d *driver) entries(ctx context.Context, seqs []uint64) (map[string]*store.Entry, error) {
	ids := make([]string, len(seqs))
	for i, seq := range seqs {
		ids[i] = event.ID(workStream, seq)
	}
	return d.store.EntriesByID(ctx, ids)
}

// latencies are the created − sent durations of the entries that came.
func latencies(sent, created []time.Time) (lat []time.Duration, lost int) {
	for i := range sent {
		if created[i].IsZero() {
			lost++
			continue
		}
		lat = append(lat, created[i].Sub(sent[i]))
	}
	slices.Sort(lat)
	return lat, lost
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func lastOf(ts []time.Time) time.Time {
	var t time.Time
	for _, x := range ts {
		if x.After(t) {
			t = x
		}
	}
	return t
}

func tenantEach(prefix string) func(int) string {
	return func(i int) string { return prefix + "-" + strconv.Itoa(i) }
}
