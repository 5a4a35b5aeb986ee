package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

func newSourceReader(js jetstream.JetStream, timeout time.Duration, log *slog.Logger) *sourceReader {
	return &sourceReader{js: js, timeout: timeout, log: log,
		streams: map[string]jetstream.Stream{}, denied: map[string]time.Time{}}
}

// API subjects whose stream name is the last token.
var apiPrefixes = []string{"$JS.API.DIRECT.GET.", "$JS.API.STREAM.MSG.GET.", "$JS.API.STREAM.INFO.", "$JS.API.STREAM.MSG.DELETE."}

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

// get returns the message at seq, or a missing reason when it cannot be read
// and never will be; an error means "try again later".
func (s *sourceReader) get(ctx context.Context, name string, seq uint64) (*jetstream.RawStreamMsg, string, error) {
	if s.isDenied(name) {
		return nil, event.MissingPermissionDenied, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	st, err := s.stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, event.MissingStreamNotFound, nil
	case err != nil && s.isDenied(name):
		return nil, event.MissingPermissionDenied, nil
	case err != nil:
		return nil, "", fmt.Errorf("stream %s: %w", name, err)
	}
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
		event.DropDirectGetHeaders(m.Header)
		if len(m.Header) == 0 {
			m.Header = nil
		}
	}
	return m, "", nil
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
