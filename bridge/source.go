package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sourceReader reads original messages from the streams advisories point at.
// It caches stream handles (their info says whether direct get is allowed)
// and remembers streams whose API subjects NATS refused with a permission
// violation: such a request gets no reply at all, only an async error, so the
// request times out and the recent violation tells a denial from an outage.
type sourceReader struct {
	js      jetstream.JetStream
	direct  *directGets
	timeout time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	streams map[string]jetstream.Stream
	denied  map[string]time.Time // stream → when a violation was last seen
}

// deniedFor is how long a permission violation is remembered: long enough to
// cover the timeouts of requests in flight, short enough that a fixed
// permission takes effect soon.
const deniedFor = time.Minute

func newSourceReader(js jetstream.JetStream, direct *directGets, timeout time.Duration, log *slog.Logger) *sourceReader {
	return &sourceReader{js: js, direct: direct, timeout: timeout, log: log,
		streams: map[string]jetstream.Stream{}, denied: map[string]time.Time{}}
}

// directGetSubject is the JetStream API subject of a stream's direct gets
// (<subject><stream>). The bridge's JetStream has neither an API prefix nor
// a domain, and the permission check below names these subjects as they are.
const directGetSubject = "$JS.API.DIRECT.GET."

// API subjects whose stream name is the last token.
var apiPrefixes = []string{directGetSubject, "$JS.API.STREAM.MSG.GET.", "$JS.API.STREAM.INFO.", "$JS.API.STREAM.MSG.DELETE."}

func (s *sourceReader) noteAsyncError(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	msg := err.Error()
	for _, p := range apiPrefixes {
		i := strings.Index(msg, p)
		if i < 0 {
			continue
		}
		rest := msg[i+len(p):]
		end := strings.IndexAny(rest, "\". '")
		if end >= 0 {
			rest = rest[:end]
		}
		if rest != "" {
			s.mu.Lock()
			s.denied[rest] = time.Now()
			s.mu.Unlock()
			s.log.Error("nats refused the bridge access to a stream", "stream", rest, "error", msg)
		}
		return
	}
}

func (s *sourceReader) isDenied(stream string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.denied[stream]
	if ok && time.Since(t) > deniedFor {
		delete(s.denied, stream)
		return false
	}
	return ok
}

func (s *sourceReader) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s.mu.Lock()
	st, ok := s.streams[name]
	s.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.streams[name] = st
	s.mu.Unlock()
	return st, nil
}

func (s *sourceReader) forget(name string) {
	s.mu.Lock()
	delete(s.streams, name)
	s.mu.Unlock()
}

// lookup returns the stream's handle, or, when there is none to be had, what
// every message of it is: missing for good (the stream is gone, or NATS
// refuses the bridge access) or an error meaning "try again later". A batch
// of advisories for one stream asks once, not once per message.
func (s *sourceReader) lookup(ctx context.Context, name string) (jetstream.Stream, original) {
	if s.isDenied(name) {
		return nil, original{missing: event.MissingPermissionDenied}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	st, err := s.stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, original{missing: event.MissingStreamNotFound}
	case err != nil && s.isDenied(name):
		return nil, original{missing: event.MissingPermissionDenied}
	case err != nil:
		return nil, original{err: fmt.Errorf("stream %s: %w", name, err)}
	}
	return st, original{}
}

// get returns the message at seq of the stream st (named name), or a missing
// reason when it cannot be read and never will be; an error means "try again
// later".
func (s *sourceReader) get(ctx context.Context, st jetstream.Stream, name string, seq uint64) (*jetstream.RawStreamMsg, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	m, err := st.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, event.MissingNotFound, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s.forget(name)
		return nil, event.MissingStreamNotFound, nil
	case err != nil && s.isDenied(name):
		return nil, event.MissingPermissionDenied, nil
	case err != nil:
		// The stream may have been recreated with other settings.
		s.forget(name)
		return nil, "", fmt.Errorf("get %s: %w", event.ID(name, seq), err)
	}
	if info := st.CachedInfo(); info != nil && info.Config.AllowDirect && m.Header != nil {
		m.Header = event.DropDirectGetHeaders(m.Header)
	}
	return m, "", nil
}

// original is what a read of one message gave: the message, or the reason it
// is missing for good, or an error meaning "try again later".
type original struct {
	msg     *jetstream.RawStreamMsg
	missing string
	err     error
}

// batchMaxBytes bounds one batch response: the server stops after the
// message that crosses it, and the bridge asks again from there.
const batchMaxBytes = 4 << 20

// getMany reads the messages at seqs of one stream. On a stream that allows
// direct gets, runs of nearby sequences are read with one batch direct get
// each (the server returns the stored messages from the run's first
// sequence on, skipping deleted ones), so a batch of advisories costs a few
// requests instead of one per message. Anything the batch read cannot settle
// (no direct get, a sparse sequence, an error or a timeout) is read one
// message at a time by get, which tells missing from unreachable.
func (s *sourceReader) getMany(ctx context.Context, name string, seqs []uint64) map[uint64]original {
	out := make(map[uint64]original, len(seqs))
	st, none := s.lookup(ctx, name)
	if st == nil {
		for _, seq := range seqs {
			out[seq] = none
		}
		return out
	}
	sorted := slices.Clone(seqs)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var single []uint64
	if len(sorted) > 1 {
		if st.CachedInfo() != nil && st.CachedInfo().Config.AllowDirect && s.direct.batchable() {
			for _, run := range runs(sorted) {
				if len(run) == 1 {
					single = append(single, run[0])
					continue
				}
				single = append(single, s.batch(ctx, name, run, out)...)
			}
		} else {
			single = sorted
		}
	} else {
		single = sorted
	}
	if len(single) == 0 {
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, seq := range single {
		wg.Go(func() {
			m, missing, err := s.get(ctx, st, name, seq)
			mu.Lock()
			out[seq] = original{msg: m, missing: missing, err: err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// runs splits sorted sequences into runs a range read serves well: a run
// grows while it would transfer at most twice its wanted messages plus a
// few, so interleaved live or acknowledged messages cost little.
func runs(sorted []uint64) [][]uint64 {
	var out [][]uint64
	start := 0
	for i := 1; i <= len(sorted); i++ {
		if i < len(sorted) && sorted[i]-sorted[start]+1 <= uint64(2*(i-start+1)+8) {
			continue
		}
		out = append(out, sorted[start:i])
		start = i
	}
	return out
}

// batch reads run (sorted, one stream) with batch direct gets into out and
// returns the sequences it could not settle. The server answers in sequence
// order, so a wanted sequence below the last one received that did not come
// is not stored (not found); those above it are asked for again. An answer
// without any message is a timeout or a refusal unless the server said
// there is nothing at or after the first sequence.
func (s *sourceReader) batch(ctx context.Context, name string, run []uint64, out map[uint64]original) []uint64 {
	for len(run) > 0 {
		span := int(run[len(run)-1] - run[0] + 1)
		got := map[uint64]*jetstream.RawStreamMsg{}
		var last uint64
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		e, err := s.direct.get(rctx, name, directRequest{Seq: run[0], Batch: span, MaxBytes: batchMaxBytes}, span,
			func(m *jetstream.RawStreamMsg) { got[m.Sequence], last = m, max(last, m.Sequence) })
		cancel()
		switch {
		case err != nil:
			s.log.Warn("batch get failed; reading one message at a time", "stream", name, "error", err)
			return run
		case last == 0 && e.status == "404":
			for _, seq := range run {
				out[seq] = original{missing: event.MissingNotFound}
			}
			return nil
		case last == 0:
			return run
		}
		rest := run[:0:0]
		for _, seq := range run {
			switch m, ok := got[seq]; {
			case ok:
				m.Header = event.DropDirectGetHeaders(m.Header)
				out[seq] = original{msg: m}
			case seq < last:
				out[seq] = original{missing: event.MissingNotFound}
			default:
				rest = append(rest, seq)
			}
		}
		run = rest
	}
	return nil
}

func (s *sourceReader) delete(ctx context.Context, name string, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	st, err := s.stream(ctx, name)
	if err != nil {
		return err
	}
	return st.DeleteMsg(ctx, seq)
}
