package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
)

// failureReader reads the failure records agentkit.Fail keeps in the KV
// bucket under <stream>.<seq>. A batch of keys is one multi-subject direct
// get on the bucket's stream (the server answers with the last value of
// every subject that has one, then an end-of-batch marker, or "no
// results"), so a batch of advisories costs one request, not one per event. Buckets without direct
// get, and any answer that did not end with the server's marker, fall back
// to one Get per key: a key the server did not answer for is never taken
// for absent.
type failureReader struct {
	kv     jetstream.KeyValue
	direct *directGets
	stream string // the bucket's stream; "" when it cannot be read in batches
	prefix string // "$KV.<bucket>."
	// denied reports a recent permission violation on a stream's API:
	// credentials that may read keys (the subject-suffixed direct get) but
	// not batches (the bare one) then read one key at a time.
	denied  func(stream string) bool
	timeout time.Duration
	log     *slog.Logger
}

// multiLastMax is the most keys asked for in one request; the server
// answers at most 1024 subjects per request.
const multiLastMax = 512

func newFailureReader(ctx context.Context, direct *directGets, denied func(string) bool, kv jetstream.KeyValue, timeout time.Duration, log *slog.Logger) (*failureReader, error) {
	r := &failureReader{kv: kv, direct: direct, denied: denied, prefix: "$KV." + kv.Bucket() + ".", timeout: timeout, log: log}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bridge: bucket status %s: %w", kv.Bucket(), err)
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		// A mirrored or sourced bucket's keys live under other subjects:
		// Get knows how to read those, the batch would not.
		if cfg := bs.StreamInfo().Config; cfg.AllowDirect && cfg.Mirror == nil && len(cfg.Sources) == 0 {
			r.stream = cfg.Name
		}
	}
	return r, nil
}

// failures returns the last failure recorded for each of keys that has
// one, and the keys whose record could not be read now (retry those later).
// An unreadable record is logged and ignored: it must not block the event.
func (r *failureReader) failures(ctx context.Context, keys []string) (map[string]*event.Failure, map[string]error) {
	out := make(map[string]*event.Failure, len(keys))
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	var rest []string
	if r.stream == "" || len(keys) == 1 || r.denied(r.stream) || !r.direct.batchable() {
		rest = keys
	} else {
		for chunk := range slices.Chunk(keys, multiLastMax) {
			rest = append(rest, r.batch(ctx, chunk, out)...)
		}
	}
	if len(rest) == 0 {
		return out, nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed map[string]error
	for _, key := range rest {
		wg.Go(func() {
			f, err := r.one(ctx, key)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if failed == nil {
					failed = map[string]error{}
				}
				failed[key] = err
			case f != nil:
				out[key] = f
			}
		})
	}
	wg.Wait()
	return out, failed
}

// one reads a single key.
func (r *failureReader) one(ctx context.Context, key string) (*event.Failure, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	entry, err := r.kv.Get(ctx, key)
	// A key the client refuses (a work stream named with characters a
	// NATS stream allows and a KV key does not, such as "@" or ":") can
	// hold no record: agentkit cannot have written one. Retried, the
	// advisory would be NAKed for ever.
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failure record %s: %w", key, err)
	}
	return r.decode(key, entry.Value()), nil
}

func (r *failureReader) decode(key string, value []byte) *event.Failure {
	var f event.Failure
	if err := json.Unmarshal(value, &f); err != nil || f.Code == "" {
		r.log.Warn("ignoring an unreadable failure record", "key", key, "error", err)
		return nil
	}
	return &f
}

// batch asks for keys in one multi-subject direct get, fills out, and
// returns the keys it cannot vouch for (all of them unless the answer was
// complete).
func (r *failureReader) batch(ctx context.Context, keys []string, out map[string]*event.Failure) []string {
	subjects := make([]string, len(keys))
	for i, k := range keys {
		subjects[i] = r.prefix + k
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	got := map[string]*event.Failure{}
	e, err := r.direct.get(ctx, r.stream, directRequest{MultiLast: subjects}, len(subjects), func(m *jetstream.RawStreamMsg) {
		key, ok := strings.CutPrefix(m.Subject, r.prefix)
		if !ok {
			return
		}
		switch m.Header.Get("KV-Operation") {
		case "DEL", "PURGE":
			return
		}
		if m.Header.Get(jetstream.MarkerReasonHeader) != "" {
			return // a TTL or purge marker: the key has no value
		}
		if f := r.decode(key, m.Data); f != nil {
			got[key] = f
		}
	})
	switch {
	case err != nil:
		r.log.Warn("failure records: batch get failed; reading one key at a time", "error", err)
		return keys
	case e.complete():
	case e.status == "404" && e.desc == "No Results":
		// None of the keys has a value.
	default:
		// A timeout, or another status (a read error on the server, too
		// many results): which keys have values is not known.
		r.log.Warn("failure records: incomplete batch answer; reading one key at a time",
			"keys", len(keys), "status", e.status, "description", e.desc)
		return keys
	}
	for k, f := range got {
		out[k] = f
	}
	return nil
}
