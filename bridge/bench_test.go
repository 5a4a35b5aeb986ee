package bridge_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkForward measures the bridge binary forwarding b.N max-delivery
// advisories (each a direct get of a 512-byte original, a KV lookup and a
// publish) against a plain publish loop of the same number of same-sized
// messages on the same emulator, and reports both rates, their ratio and the
// binary's peak RSS. Both publish to a topic without subscriptions so the
// emulator's storage does not grow during the run.
//
//	go test ./bridge -run '^$' -bench Forward -benchtime 20000x
func BenchmarkForward(b *testing.B) {
	ctx := testenv.Context(b)
	n := testenv.NewNATS(b)
	_, js := n.Connect(b)
	project := testenv.Project(b)
	host := testenv.PubSubHost(b)
	ps, err := bridge.NewPubSubClient(ctx, project, host)
	if err != nil {
		b.Fatal(err)
	}
	defer ps.Close()
	topic := "projects/" + project + "/topics/bench"
	if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		b.Fatal(err)
	}
	if err := bridge.Ensure(ctx, js, bridge.DefaultNames, testLogger(b)); err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"}, AllowDirect: true}); err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte("p"), 512)
	// Originals and their advisories, published asynchronously in bulk.
	for i := range b.N {
		// Wait for the outstanding acks now and then: past the client's
		// limit of pending async publishes it stalls and errors out.
		if i > 0 && i%1000 == 0 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("bulk publish did not complete")
			}
		}
		if _, err := js.PublishAsync("agents.backend.tasks.bench", payload); err != nil {
			b.Fatal(err)
		}
		adv := fmt.Sprintf(`{"type":%q,"id":"b%d","timestamp":"2026-11-21T12:00:00Z","stream":"TASKS","consumer":"worker","stream_seq":%d,"deliveries":3}`,
			event.AdvisoryMaxDeliver, i, i+1)
		if _, err := js.PublishAsync("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TASKS.worker", []byte(adv)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		b.Fatal("bulk publish did not complete")
	}

	// The raw pipeline runs before and after the bridge, on its own
	// consumers of the same advisories, and its rate is taken over both:
	// the load of this shared machine drifts, and a comparison made on one
	// side of the bridge's run only would carry that drift into the ratio.
	// The publisher has the bridge's bundling settings.
	pub := ps.Publisher(topic)
	pub.PublishSettings.CountThreshold = 100
	pub.PublishSettings.DelayThreshold = 5 * time.Millisecond
	pub.PublishSettings.ByteThreshold = 5_000_000
	window := 256
	if v, err := strconv.Atoi(os.Getenv("BENCH_MAX_IN_FLIGHT")); err == nil {
		window = v
	}
	pipeSecs := rawPipeline(ctx, b, js, pub, "raw-pipeline-before", b.N, window).Seconds()

	env := []string{"GOOGLE_CLOUD_PROJECT=" + project, "PUBSUB_EMULATOR_HOST=" + host, "NATS_URL=" + n.URL,
		"DLQ_TOPIC=bench", "BRIDGE_ENSURE_TOPIC=false"}
	if v := os.Getenv("BENCH_MAX_IN_FLIGHT"); v != "" {
		env = append(env, "BRIDGE_MAX_IN_FLIGHT="+v)
	}
	p := startBinary(b, env, freePort(b))
	cpuBefore := cpuTime(p.cmd.Process.Pid)
	b.ResetTimer()
	start := time.Now()
	for forwarded(b, p.port) < b.N {
		time.Sleep(10 * time.Millisecond)
	}
	bridgeSecs := time.Since(start).Seconds()
	b.StopTimer()
	rss := peakRSS(p.cmd.Process.Pid)
	cpu := cpuTime(p.cmd.Process.Pid) - cpuBefore
	p.kill(9)

	// The same bridge code in the test process, like the raw pipelines: the
	// binary's NATS and gRPC traffic crosses to other processes, theirs does
	// not, so the like-for-like ratio compares this run with them. Its own
	// durable consumer reads the same advisories again.
	inSecs := inProcessBridge(ctx, b, n, ps, topic).Seconds()

	// The plain loop: publish everything, then wait on every result, with
	// the bridge's client settings and an event-sized body.
	sample, err := json512Event(payload)
	if err != nil {
		b.Fatal(err)
	}
	// The same NATS and Pub/Sub work as the bridge, without the bridge,
	// once after it (the first run is before it).
	pipeSecs += rawPipeline(ctx, b, js, pub, "raw-pipeline-after", b.N, window).Seconds()
	pipeSecs /= 2
	perEventSecs := rawPipelinePerEvent(ctx, b, js, pub, b.N, window).Seconds()
	// Unbounded: every message outstanding at once.
	rawStart := time.Now()
	results := make([]*pubsub.PublishResult, b.N)
	for i := range results {
		results[i] = pub.Publish(ctx, &pubsub.Message{Data: sample, Attributes: map[string]string{"kind": "max_deliver"}})
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			b.Fatal(err)
		}
	}
	rawSecs := time.Since(rawStart).Seconds()
	// Windowed: at most the bridge's in-flight bound outstanding, each
	// result awaited as it comes, as the bridge does.
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	winStart := time.Now()
	for range b.N {
		sem <- struct{}{}
		r := pub.Publish(ctx, &pubsub.Message{Data: sample, Attributes: map[string]string{"kind": "max_deliver"}})
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := r.Get(ctx); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	winSecs := time.Since(winStart).Seconds()
	pub.Stop()

	b.ReportMetric(float64(b.N)/winSecs, "windowed-publishes/s")
	b.ReportMetric(float64(b.N)/bridgeSecs/(float64(b.N)/winSecs), "ratio-vs-windowed")
	bridgeRate, rawRate := float64(b.N)/bridgeSecs, float64(b.N)/rawSecs
	b.ReportMetric(bridgeRate, "events/s")
	b.ReportMetric(rawRate, "raw-publishes/s")
	b.ReportMetric(bridgeRate/rawRate, "ratio-vs-unbounded")
	inRate, pipeRate := float64(b.N)/inSecs, float64(b.N)/pipeSecs
	b.ReportMetric(pipeRate, "pipeline-events/s")
	b.ReportMetric(inRate, "in-process-events/s")
	b.ReportMetric(inRate/pipeRate, "ratio-vs-pipeline")
	b.ReportMetric(bridgeRate/pipeRate, "binary-ratio-vs-pipeline")
	b.ReportMetric(float64(b.N)/perEventSecs, "per-event-pipeline-events/s")
	b.ReportMetric(float64(rss)/(1<<20), "bridge-peak-RSS-MiB")
	b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "bridge-CPU-µs/event")
}

// forwarded reads jsdlq_bridge_forwarded_total from the binary's /metrics.
func forwarded(tb testing.TB, port int) int {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	total := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "jsdlq_bridge_forwarded_total{") {
			f := strings.Fields(line)
			v, _ := strconv.Atoi(f[len(f)-1])
			total += v
		}
	}
	return total
}

// cpuTime returns the user plus system CPU time of a process (Linux; 0 when
// unknown), from /proc/<pid>/stat in clock ticks of 1/100 s.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are the
	// 14th and 15th fields of the whole line.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// peakRSS returns VmHWM of a process in bytes (0 when unknown).
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

var benchNow = sync.OnceValue(func() time.Time { return time.Now().UTC() })

// json512Event is an event like the ones the benchmark's bridge produces.
func json512Event(payload []byte) ([]byte, error) {
	e := event.Event{Schema: event.Schema, ID: "TASKS.1", Kind: event.KindMaxDeliver, Stream: "TASKS", StreamSeq: 1,
		Consumer: "worker", Tenant: "default", Agent: "backend", ObservedAt: benchNow(),
		Advisory: &event.Advisory{Type: event.AdvisoryMaxDeliver, ID: "b0", Timestamp: benchNow(), Stream: "TASKS",
			Consumer: "worker", StreamSeq: 1, Deliveries: 3}}
	e.Message.Subject = "agents.backend.tasks.bench"
	t := benchNow()
	e.Message.PublishedAt = &t
	e.Message.SetPayload(payload)
	return event.Encode(e)
}

// inProcessBridge runs a Bridge in the test process, with the binary's
// default settings and a durable consumer of its own, until it forwarded
// b.N events, and returns how long that took.
func inProcessBridge(ctx context.Context, b *testing.B, n *testenv.NATS, ps *pubsub.Client, topic string) time.Duration {
	b.Helper()
	nc, _ := n.Connect(b)
	br, err := bridge.New(bridge.Config{Topic: topic, Names: bridge.DefaultNames, Consumer: "bench-in-process"},
		nc, ps, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- br.Run(rctx) }()
	// The clock starts when the bridge has set up (streams verified, topic
	// checked, consumer created), as the raw pipeline's does after its
	// consumer exists.
	for ok, _ := br.Healthy(); !ok; ok, _ = br.Healthy() {
		select {
		case err := <-done:
			b.Fatalf("in-process bridge ended: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	start := time.Now()
	for {
		if got := br.Counts().Forwarded[string(event.KindMaxDeliver)]; got >= uint64(b.N) {
			break
		}
		select {
		case err := <-done:
			b.Fatalf("in-process bridge ended: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("in-process bridge: %v", err)
	}
	return elapsed
}
