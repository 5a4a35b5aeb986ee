package bridge_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go/jetstream"
)

// Pub/Sub goes away while the bridge forwards and comes back empty (as the
// emulator does): publishes fail, messages are NAKed and wait in JetStream,
// health turns red, and once the topic is back every event arrives.
//
// The bridge reaches the emulator through a gate (a TCP relay) that stays
// shut until the test has recreated the topic *and* its subscription: Pub/Sub
// drops messages published to a topic without subscriptions, and that race
// belongs to the test (in production both outlive an outage), not the bridge.
func TestPubSubOutageLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t)
	emu := testenv.NewPubSubEmulator(t)
	gate := newGate(t, emu.Host)
	project := testenv.Project(t)
	admin, err := bridge.NewPubSubClient(ctx, project, emu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ps, err := bridge.NewPubSubClient(ctx, project, gate.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	h := &harness{nats: testenv.NewNATS(t), ps: ps, project: project}
	h.nc, h.js = h.nats.Connect(t)
	var sub string
	h.topic, sub = newTopic(t, ctx, admin, project, "dlq-events")
	first := collect(t, admin, sub)
	h.sink = first
	h.startBridge(t, func(c *bridge.Config) {
		c.EnsureTopic = false
		c.PublishTimeout = 3 * time.Second
		c.MaxNakDelay = 2 * time.Second
	})
	cons := taskStream(t, h.js, "TASKS", "agents.>", jetstream.LimitsPolicy, 1)
	publishTasks := func(n int) []string {
		var ids []string
		for i := range n {
			ack := publish(t, ctx, h.js, "agents.a.tasks.x", []byte{byte(i)})
			ids = append(ids, event.ID("TASKS", ack.Sequence))
		}
		exhaust(t, cons)
		return ids
	}
	publishTasks(10)
	first.waitFor(10, 30*time.Second)

	emu.Stop()
	gate.shut()
	during := publishTasks(20)
	testenv.WaitFor(t, 30*time.Second, func() error {
		if h.b.Counts().Failed["publish"] == 0 {
			return errors.New("no publish failed during the outage")
		}
		return nil
	})
	if ok, why := h.b.Healthy(); ok {
		t.Errorf("Healthy during the outage = true (%s)", why)
	}
	emu.Start(t)
	_, sub = newTopic(t, ctx, admin, project, "dlq-events")
	second := collect(t, admin, sub)
	gate.open()
	t.Cleanup(func() {
		if t.Failed() {
			c, _ := h.js.Consumer(context.Background(), "DLQ_ADVISORIES", "dlq-bridge")
			info, _ := c.Info(context.Background())
			t.Logf("counts %+v; consumer %+v", h.b.Counts(), info)
		}
	})
	// The first sink's subscriber reconnects to the recreated subscription
	// of the same name, so the two share the deliveries.
	testenv.WaitFor(t, 60*time.Second, func() error {
		var lost []string
		for _, id := range during {
			if len(first.all(id)) == 0 && len(second.all(id)) == 0 {
				lost = append(lost, id)
			}
		}
		if len(lost) > 0 {
			return fmt.Errorf("events lost in the outage: %v", lost)
		}
		return nil
	})
	testenv.WaitFor(t, 10*time.Second, func() error {
		if ok, why := h.b.Healthy(); !ok {
			return fmt.Errorf("bridge not healthy again after the outage: %s", why)
		}
		return nil
	})
}

// gate relays TCP connections to a backend while open; shut refuses new
// connections and cuts the open ones.
type gate struct {
	addr    string
	backend string
	mu      sync.Mutex
	closed  bool
	conns   []net.Conn
}

func newGate(t *testing.T, backend string) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{addr: l.Addr().String(), backend: backend}
	t.Cleanup(func() { l.Close(); g.shut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go g.relay(c)
		}
	}()
	return g
}

func (g *gate) relay(c net.Conn) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		c.Close()
		return
	}
	g.mu.Unlock()
	b, err := net.Dial("tcp", g.backend)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	g.conns = append(g.conns, c, b)
	g.mu.Unlock()
	go func() { _, _ = io.Copy(b, c); b.Close() }()
	_, _ = io.Copy(c, b)
	c.Close()
}

func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

func (g *gate) open() {
	g.mu.Lock()
	g.closed = false
	g.mu.Unlock()
}

// proc is a bridge binary running in its own process group.
type proc struct {
	cmd  *exec.Cmd
	port int
	log  string
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startBinary(t testing.TB, env []string, port int) *proc {
	t.Helper()
	bin := testenv.Binary(t, "github.com/jsdlq/jsdlq/cmd/bridge")
	logPath := filepath.Join(t.TempDir(), "bridge.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), append(env, fmt.Sprintf("PORT=%d", port))...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logFile.Close()
	p := &proc{cmd: cmd, port: port, log: logPath}
	t.Cleanup(func() {
		p.kill(syscall.SIGKILL)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("bridge log (tail):\n%s", b)
		}
	})
	testenv.WaitFor(t, 30*time.Second, func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("bridge binary not healthy; log:\n%s", b)
	})
	return p
}

func (p *proc) kill(sig syscall.Signal) {
	if p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	_ = p.cmd.Wait()
}

func (p *proc) logContains(s string) bool {
	f, err := os.Open(p.log)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			return true
		}
	}
	return false
}

// The real binary is SIGKILLed mid-stream and restarted: every dead message
// arrives; duplicates are possible and carry the same event id (the sink
// keys by id, and counts them).
func TestBinaryKilledMidStreamLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t)
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ps, project := testenv.PubSub(t)
	_, sub := newTopic(t, ctx, ps, project, "dlq-events")
	sink := collect(t, ps, sub)
	env := []string{"GOOGLE_CLOUD_PROJECT=" + project, "PUBSUB_EMULATOR_HOST=" + testenv.PubSubHost(t),
		"NATS_URL=" + n.URL, "BRIDGE_MAX_IN_FLIGHT=8", "BRIDGE_ACK_WAIT=10s"}
	port := freePort(t)

	// A backlog of advisories first, so that the kill lands mid-stream.
	const total = 2000
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	cons := taskStream(t, js, "TASKS", "agents.>", jetstream.LimitsPolicy, 1)
	for i := range total {
		publish(t, ctx, js, "agents.a.tasks.x", fmt.Appendf(nil, "task %d", i))
	}
	exhaust(t, cons)
	p := startBinary(t, env, port)
	// Kill it as soon as forwarding is under way.
	testenv.WaitFor(t, 30*time.Second, func() error {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.events) < 20 {
			return fmt.Errorf("bridge forwarded %d events, want 20 before the kill", len(sink.events))
		}
		return nil
	})
	p.kill(syscall.SIGKILL)
	sink.mu.Lock()
	atKill := len(sink.events)
	sink.mu.Unlock()
	adv, _ := js.Consumer(ctx, "DLQ_ADVISORIES", "dlq-bridge")
	info, err := adv.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed after %d of %d events; %d advisories not yet acked", atKill, total, info.NumPending+uint64(info.NumAckPending))

	p = startBinary(t, env, port)
	got := sink.waitFor(total, 60*time.Second)
	dups := 0
	for id, evs := range got {
		dups += len(evs) - 1
		for _, e := range evs {
			if e.ID != id || string(e.Message.Data) != string(evs[0].Message.Data) {
				t.Errorf("duplicate of %s differs: %+v", id, e)
			}
		}
	}
	t.Logf("%d distinct events, %d duplicates", len(got), dups)
	// SIGTERM drains and exits cleanly.
	p.kill(syscall.SIGTERM)
	if !p.logContains("bridge stopped") {
		t.Error("bridge did not log a clean stop after SIGTERM")
	}
}
