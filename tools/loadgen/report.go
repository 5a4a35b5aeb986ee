package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// goBench holds `go test -bench` results: benchmark name (without the
// -GOMAXPROCS suffix) → unit → every value seen (one per -count).
type goBench map[string]map[string][]float64

var benchSuffix = regexp.MustCompile(`-\d+$`)

func parseGoBench(path string) (*goBench, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("go benchmark output: %w", err)
	}
	defer f.Close()
	g := goBench{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue
		}
		name := benchSuffix.ReplaceAllString(fields[0], "")
		if g[name] == nil {
			g[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			g[name][fields[i+1]] = append(g[name][fields[i+1]], v)
		}
	}
	return &g, sc.Err()
}

// median of one benchmark metric; ok is false when it was not measured.
func (g *goBench) median(name, unit string) (float64, bool) {
	if g == nil {
		return 0, false
	}
	vs := slices.Clone((*g)[name][unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	return vs[len(vs)/2], true
}

// runs is how many values a median is taken from.
func runs(g *goBench, name, unit string) string {
	if g == nil {
		return "0"
	}
	return fmt.Sprint(len((*g)[name][unit]))
}

func verdict(ok bool, miss string) string {
	if ok {
		return "met"
	}
	return "**missed** " + miss
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

func render(ctx context.Context, root string, o options, r *results, g *goBench) (string, error) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	// ratioRow is a rate next to its physical limit: their ratio must reach
	// target.
	ratioRow := func(measure string, rate float64, limit string, limitRate, ratio, target float64) {
		w("| %s | %.0f events/s | %s: %.0f/s | %.2f× | ≥ %.1f× | %s |\n",
			measure, rate, limit, limitRate, ratio, target, verdict(ratio >= target, fmt.Sprintf("by %.2f×", target-ratio)))
	}
	w("# Performance\n\n")
	w("Written by `make bench` (`go test -bench` on the emulators, then `go run ./tools/loadgen` on a private\n")
	w("stack on free ports). Do not edit the tables by hand: rerun `make bench`. The section \"Hot-spot fixes\"\n")
	w("at the end is kept across runs.\n\n")
	w("Every figure stands next to its physical limit measured in the same run on the same machine: this is a\n")
	w("shared, noisy VM, so read ratios and medians, not absolute times.\n\n")
	w("| | |\n|---|---|\n")
	w("| date | %s |\n", r.Started.Format(time.RFC3339))
	w("| commit | %s |\n", gitCommit(ctx, root))
	w("| machine | %d cores (`nproc`), %s memory, %s |\n", runtime.NumCPU(), memTotal(), cpuModel())
	w("| load average at start | %s |\n", loadAvg())
	w("| Go | %s |\n", goVersion(ctx))
	w("\n## Summary\n\n")
	w("| measure | jsdlq | physical limit, same run | ratio / figure | target | verdict |\n|---|---|---|---|---|---|\n")

	// Bridge.
	if bridge, ok := g.median("BenchmarkForward", "events/s"); ok {
		pipe, _ := g.median("BenchmarkForward", "pipeline-events/s")
		if in, ok := g.median("BenchmarkForward", "in-process-events/s"); ok {
			pr, _ := g.median("BenchmarkForward", "ratio-vs-pipeline")
			w("| bridge forwarding, like with like: the bridge's code in the test process (batched reads, publish, ack), %s runs | %.0f events/s | the same NATS and Pub/Sub work written bare and batched the same way, in the same process (raw pipeline, 256 in flight, before and after the bridge): %.0f/s | %.2f× | ≥ 0.9× | %s |\n",
				runs(g, "BenchmarkForward", "in-process-events/s"), in, pipe, pr, verdict(pr >= 0.9, fmt.Sprintf("by %.2f×", 0.9-pr)))
		}
		if br, ok := g.median("BenchmarkForward", "binary-ratio-vs-pipeline"); ok {
			w("| bridge binary (its own process, as deployed) | %.0f events/s | the raw pipeline above, which shares the test process with nats-server: %.0f/s | %.2f× | reported | |\n",
				bridge, pipe, br)
		}
		if pe, ok := g.median("BenchmarkForward", "per-event-pipeline-events/s"); ok {
			w("| the same work one request per event (how the bridge worked before) | raw pipeline, one direct get, one KV get and one publish per event, same run: %.0f/s | | | | |\n", pe)
		}
		win, _ := g.median("BenchmarkForward", "windowed-publishes/s")
		raw, _ := g.median("BenchmarkForward", "raw-publishes/s")
		ratio, _ := g.median("BenchmarkForward", "ratio-vs-windowed")
		w("| bridge binary next to a bare publish loop | %.0f events/s | raw Pub/Sub publish loop, 256 outstanding: %.0f/s (unbounded: %.0f/s); it leaves NATS idle | %.2f× | reported | |\n",
			bridge, win, raw, ratio)
	} else {
		w("| bridge forwarding | not measured | | | ≥ 0.9× | |\n")
	}
	if c, ok := g.median("BenchmarkClassifyVsRawTx", "classify-events/s"); ok {
		raw, _ := g.median("BenchmarkClassifyVsRawTx", "raw-tx/s")
		ratio, _ := g.median("BenchmarkClassifyVsRawTx", "ratio")
		ratioRow("classify, 8 in flight", c, "raw Firestore transaction loop (1 read + 4 writes), 8 in flight", raw, ratio, 0.8)
	} else {
		w("| classify | not measured | | | ≥ 0.8× | |\n")
	}
	if rd, ok := g.median("BenchmarkClassify/inflight=8", "fs-reads/entry"); ok {
		wr, _ := g.median("BenchmarkClassify/inflight=8", "fs-writes/entry")
		w("| Firestore ops per new entry (classify, counted by `store.Ops()`) | %.3f reads + %.3f writes | | | ≤ 1 + 4 | %s |\n", rd, wr, verdict(rd <= 1 && wr <= 4, "see storage.md"))
	}
	for _, l := range r.Latency {
		target, verdictText := "", ""
		if l.Offered == 200 {
			target, verdictText = "p99 < 1 s", verdict(l.P99 < time.Second && l.Arrived == l.N, fmt.Sprintf("by %s", ms(l.P99-time.Second)))
		}
		w("| advisory → Firestore entry at %.0f events/s offered (%d events over %s) | p50 %s, p99 %s, max %s | Pub/Sub emulator push alone: %.0f msgs/s; classify in-process: %s events/s | %d/%d arrived; %.0f entries/s landed | %s | %s |\n",
			l.Offered, l.N, r.Duration, ms(l.P50), ms(l.P99), ms(l.Max), r.PushCeiling, classifyRate(g), l.Arrived, l.N, l.ThroughputObserved, target, verdictText)
	}
	if lp50, ok := g.median("BenchmarkDispatchLateness", "p50-late-ms"); ok {
		lp99, _ := g.median("BenchmarkDispatchLateness", "p99-late-ms")
		w("| replay dispatch lateness (schedule time → replay claims the entry), %d replays | p50 %s, p99 %s | Cloud Tasks emulator alone to an empty handler: p50 %.1f ms, p99 %.1f ms | %d claimed, %d replayed | | |\n",
			r.Replay.N, ms(r.Replay.P50), ms(r.Replay.P99), lp50, lp99, r.Replay.Claimed, r.Replay.Replayed)
	} else {
		w("| replay dispatch lateness, %d replays | p50 %s, p99 %s | | %d claimed, %d replayed | | |\n",
			r.Replay.N, ms(r.Replay.P50), ms(r.Replay.P99), r.Replay.Claimed, r.Replay.Replayed)
	}
	st := r.Storm
	stormRate := float64(st.Arrived) / st.Duration.Seconds()
	w("| storm: %d dead messages, one tenant, hour(s) %s | %s (%.0f entries/s) | the 1 000/s latency run above (one tenant per event) | lost %d, duplicates %d, metrics exact: %s; %d held by the open breaker, %d scheduled | 0 lost, 0 duplicates, exact | %s |\n",
		st.N, strings.Join(st.Hours, ", "), ms(st.Duration), stormRate, st.Lost, st.Duplicates, yesNo(st.Exact), st.Held, st.Scheduled,
		verdict(st.Lost == 0 && st.Duplicates == 0 && st.Exact, ""))
	if st.BareLoop > 0 {
		ceiling, which := r.PushCeiling, "the push leg alone"
		if st.BareLoop < ceiling {
			ceiling, which = st.BareLoop, "the bare Firestore loop"
		}
		ratio := stormRate / ceiling
		w("| storm throughput next to its ceilings | %.0f entries/s | the smaller of: Pub/Sub push leg alone %.0f msgs/s (at most %d pushes outstanding); the store's own Record of copies of a storm entry as a bare loop (create the entry, add it to a metric shard), best of 4/8/16 at a time (%d), %.0f/s (%s) | %.2f× | ≥ 0.8× | %s |\n",
			stormRate, r.PushCeiling, r.PushConc, st.BareConc, st.BareLoop, which, ratio, verdict(ratio >= 0.8, fmt.Sprintf("by %.2f× (see \"The targets missed\")", 0.8-ratio)))
		if st.PushTx > 0 {
			w("| storm next to the push leg with that bare Record behind each push | %.0f entries/s | the emulator pushing to an endpoint that runs the store's Record, then answers: %.0f msgs/s | %.2f× | | |\n",
				stormRate, st.PushTx, stormRate/st.PushTx)
		}
	}
	w("| bridge peak RSS (VmHWM of the binary over the whole load run) | %.1f MiB | | | < 64 MiB | %s |\n", mib(r.BridgeRSS), verdict(r.BridgeRSS < 64<<20, ""))
	if v, ok := g.median("BenchmarkForward", "bridge-peak-RSS-MiB"); ok {
		w("| bridge peak RSS in the forwarding benchmark (256 in flight, saturated) | %.1f MiB | | | < 64 MiB | %s |\n", v, verdict(v < 64, ""))
	}
	w("| functions host peak RSS (classify + replay + reconcile in one process) | %.1f MiB | | | | |\n", mib(r.FnRSS))

	w("\n## Firestore operations over an entry's life\n\n")
	w("Counted on the code path by `store.Ops()` in the benchmarks (not estimated):\n\n")
	w("| step | reads | writes | source |\n|---|---|---|---|\n")
	for _, op := range []struct{ step, bench, reads, writes string }{
		{"classify, new entry (breaker closed)", "BenchmarkClassify/inflight=8", "fs-reads/entry", "fs-writes/entry"},
		{"replay (claim, idempotency lookup, breaker, publish, mark replayed)", "BenchmarkReplay", "reads/op", "writes/op"},
		{"reconcile over the entry's life (replayed → recovered, and every run while it is in the 25-hour window; 4 000 dead messages, 4 640 entries in it)",
			"BenchmarkEntryLife", "reconcile-reads/entry", "reconcile-writes/entry"},
		{"the whole life: classify, replay, recovery, every reconcile run", "BenchmarkEntryLife", "reads/entry", "writes/entry"},
	} {
		if rd, ok := g.median(op.bench, op.reads); ok {
			wr, _ := g.median(op.bench, op.writes)
			source, _, _ := strings.Cut(op.bench, "/")
			w("| %s | %.2f | %.2f | %s |\n", op.step, rd, wr, source)
		}
	}

	w("\n## Where the CPU went\n\n")
	w("Cores used by each process group during a run (CPU seconds / wall seconds; the machine has %d):\n\n", runtime.NumCPU())
	names := []string{"bridge", "functions", "nats", "pubsub", "firestore", "cloudtasks"}
	w("| run | %s | total |\n|---|%s---|\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	row := func(label string, c cpuShare) {
		var cells []string
		total := 0.0
		for _, n := range names {
			cells = append(cells, fmt.Sprintf("%.2f", c[n]))
			total += c[n]
		}
		w("| %s | %s | %.2f |\n", label, strings.Join(cells, " | "), total)
	}
	for _, l := range r.Latency {
		row(fmt.Sprintf("%.0f events/s", l.Offered), l.CPU)
	}
	row("storm", st.CPU)
	w("\n%s", methodText)
	return b.String(), nil
}

const methodText = `## Method

- **Stack.** loadgen builds the bridge, the functions host, nats-server and the Cloud Tasks
  emulator, and starts them with the gcloud Firestore and Pub/Sub emulators on free loopback ports,
  each in its own watched process group (they die with the driver). Topic, push subscription to
  ` + "`/Classify`" + ` (with its dead-letter topic) and the ` + "`dlq-replay`" + ` queue (500 dispatches/s) are
  created as Terraform would. The Cloud Tasks emulator keeps its state in memory (with a data
  directory it fsyncs every task operation, which would measure the VM's disk). Nothing of
  ` + "`make up`" + `'s default ports is touched.
- **Push leg alone.** Before the runs, 3 000 event-sized messages are published at once to a push
  subscription whose endpoint answers 204 at once: the emulator's own push rate, the ceiling of
  every advisory → entry row. The endpoint also records the most pushes outstanding at once (the
  emulator keeps at most 2 per subscription, whatever the endpoint's latency: cloud-pubsub-emulator
  0.8.20 starts two push loops per push subscription, each pulling one message and waiting for the
  endpoint's answer before the next, and no flag or setting changes the two).
- **Load.** Each dead message is a 512-byte task in a Limits work stream with direct get, plus the
  terminated advisory JetStream would emit for it (same JSON), published by the driver on the
  advisory subject at an exact offered rate. Latency runs give every event its own tenant (breakers
  stay closed, so every entry is ` + "`scheduled`" + ` with a Cloud Tasks task, the full classify path); the queue
  is paused until the replay run so those replays do not land in later runs.
- **Latency** is Firestore's own commit time of the entry (` + "`CreateTime`" + `) minus the time the advisory
  was published; both clocks are this machine's. A 200-event warm-up runs first.
- **Storm**: all advisories of one tenant at once; duration is first advisory → last entry committed;
  lost = entries missing after the wait; duplicates = the hour's ` + "`by_tenant`" + ` count above the entries
  found (an entry id is the event id, so a duplicate can only show as a double count); exact = the
  metric equals the entries. Its ceilings, right after it: the push leg alone (above); the store's
  own ` + "`Record`" + ` of copies of a held storm entry (a tenant and ids of their own) as a bare loop at 4, 8 and
  16 at a time, the best of the three, after the tenant's first 20 were recorded one at a time (its
  breaker opens, as in the storm; a conflict is retried, as Pub/Sub redelivers): the storm's exact
  Firestore reads and writes without classify; and the push leg with that ` + "`Record`" + ` behind each push, 2 000 messages.
- **Replay lateness**: ` + "`context_window_overflow`" + ` events (10 s delay); the lateness is the
  ` + "`replaying`" + ` transition's time minus the entry's ` + "`next_retry_at`" + ` (the task's schedule time): the
  Cloud Tasks emulator's dispatch, OIDC verification and the claim transaction.
- **RSS** is ` + "`VmHWM`" + ` from ` + "`/proc/PID/status`" + ` of the real binaries at the end of the run.
- **Ratios.** The bridge's code, run in the test process, is compared with the same batched NATS
  and Pub/Sub work written bare in that process (before and after it, averaged), the binary with the
  same and with a publish loop on the same Pub/Sub emulator with the bridge's own bound on
  outstanding publishes; classify with a bare transaction loop doing the
  same reads and writes with the same concurrency, in alternating rounds (median of 3). Both loops
  do strictly less work than the component, so a ratio is the share of the storage/transport's
  capacity the component reaches.
`

func classifyRate(g *goBench) string {
	if v, ok := g.median("BenchmarkClassify/inflight=8", "events/s"); ok {
		return fmt.Sprintf("%.0f", v)
	}
	return "?"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func gitCommit(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " (work tree has uncommitted changes)"
	}
	return c
}

func goVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "go", "version").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// fixesHeading starts the hand-written section a rerun keeps.
const fixesHeading = "## Hot-spot fixes"

// keepFixes appends the hand-written section of the existing report.
func keepFixes(path, report string) string {
	old, err := os.ReadFile(path)
	if err != nil {
		return report
	}
	if i := strings.Index(string(old), fixesHeading); i >= 0 {
		return report + "\n" + string(old[i:])
	}
	return report
}
