package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// batchable reports whether the connected server answers batch direct
// gets (nats-server 2.11 and later). An older one ignores the batch and
// sends one message without the end marker, so every batch would wait out
// its timeout before the one-at-a-time reads: ask per call, because a
// reconnect may land on another server.
func (d *directGets) batchable() bool { return batchVersion(d.nc.ConnectedServerVersion()) }

// batchVersion reports whether a nats-server of version v answers batch
// direct gets; an unknown version does not.
func batchVersion(v string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 11
}

// directGets sends batch direct gets (a range of a stream, or the last
// message of many subjects) and routes their answers. One wildcard
// subscription serves every request, as the client's own request mux does
// for single answers: a subscription per request would cost a SUB and an
// UNSUB (each invalidating the server's subject cache) and a client channel
// of 64 Ki slots per batch.
type directGets struct {
	nc     *nats.Conn
	prefix string // "<inbox>."

	mu      sync.Mutex
	sub     *nats.Subscription
	next    uint64
	waiting map[string]chan *nats.Msg
}

func newDirectGets(nc *nats.Conn) *directGets {
	return &directGets{nc: nc, prefix: nc.NewInbox() + ".", waiting: map[string]chan *nats.Msg{}}
}

// start subscribes to the answers; stop ends it.
func (d *directGets) start() error {
	sub, err := d.nc.Subscribe(d.prefix+"*", func(m *nats.Msg) {
		d.mu.Lock()
		ch := d.waiting[m.Subject[len(d.prefix):]]
		d.mu.Unlock()
		if ch == nil {
			return // the request gave up
		}
		select {
		case ch <- m:
		default:
			// More answers than asked for: the request sees no end
			// marker and treats its answer as incomplete.
		}
	})
	if err != nil {
		return fmt.Errorf("bridge: subscribe to batch answers: %w", err)
	}
	d.mu.Lock()
	d.sub = sub
	d.mu.Unlock()
	return nil
}

func (d *directGets) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sub != nil {
		_ = d.sub.Unsubscribe()
		d.sub = nil
	}
}

// directRequest is the server's batch direct get request.
type directRequest struct {
	Seq       uint64   `json:"seq,omitempty"`
	Batch     int      `json:"batch,omitempty"`
	MaxBytes  int      `json:"max_bytes,omitempty"`
	MultiLast []string `json:"multi_last,omitempty"`
}

// end is how a batch answer ended: the server's status and description
// ("204 EOB" for a complete answer, "404 …" for nothing to return), or ""
// when no end came (timeout, refusal, too many answers).
type end struct{ status, desc string }

func (e end) complete() bool { return e.status == "204" }

// get sends req to stream's direct get API and calls each with every
// message of the answer, in the server's order, until the end or ctx.
// expect bounds the answer's messages (the request's batch or subjects).
func (d *directGets) get(ctx context.Context, stream string, req directRequest, expect int, each func(*jetstream.RawStreamMsg)) (end, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return end{}, err
	}
	ch := make(chan *nats.Msg, expect+1)
	d.mu.Lock()
	if d.sub == nil {
		d.mu.Unlock()
		return end{}, fmt.Errorf("bridge: batch answers not subscribed")
	}
	d.next++
	token := strconv.FormatUint(d.next, 36)
	d.waiting[token] = ch
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.waiting, token)
		d.mu.Unlock()
	}()
	if err := d.nc.PublishRequest(directGetSubject+stream, d.prefix+token, body); err != nil {
		return end{}, fmt.Errorf("direct get %s: %w", stream, err)
	}
	for {
		select {
		case <-ctx.Done():
			return end{}, nil
		case m := <-ch:
			if len(m.Data) == 0 {
				if s := m.Header.Get("Status"); s != "" {
					return end{status: s, desc: m.Header.Get("Description")}, nil
				}
			}
			msg, err := rawMsg(m)
			if err != nil {
				return end{}, fmt.Errorf("direct get %s: %w", stream, err)
			}
			each(msg)
		}
	}
}

// rawMsg reads a direct get answer's message from the headers the server
// adds to it.
func rawMsg(m *nats.Msg) (*jetstream.RawStreamMsg, error) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("answer without a valid sequence: %w", err)
	}
	t, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("answer without a valid time: %w", err)
	}
	subj := m.Header.Get(jetstream.SubjectHeader)
	if subj == "" {
		return nil, fmt.Errorf("answer without a subject")
	}
	return &jetstream.RawStreamMsg{Subject: subj, Sequence: seq, Header: m.Header, Data: m.Data, Time: t}, nil
}
