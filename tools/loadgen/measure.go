package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/firestore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/tools/stack"
)

type latencyRun struct {
	Offered, Sent      float64 // events/s offered and actually sent
	N, Arrived         int
	P50, P99, Max      time.Duration
	Drain              time.Duration // last advisory → last entry
	CPU                cpuShare
	ThroughputObserved float64 // entries/s over the whole run
}

type stormRun struct {
	N, Arrived, Lost, Duplicates int
	Duration                     time.Duration // first advisory → last entry
	Hours                        []string
	MetricTotal                  int64
	Exact                        bool
	Held, Scheduled              int64
	CPU                          cpuShare
	BareLoop                     float64 // entries/s of the bare Firestore loop, same run
	BareConc                     int
	PushTx                       float64     // messages/s pushed to an endpoint that does the bare transaction
	template                     store.Entry // a held storm entry, copied by the bare loops
}

type replayRun struct {
	N, Claimed, Replayed int
	P50, P99, Max        time.Duration
}

type results struct {
	Started          time.Time
	Latency          []latencyRun
	Storm            stormRun
	Replay           replayRun
	BridgeRSS, FnRSS int64
	PushCeiling      float64 // messages/s the emulator pushes to an endpoint that acks at once
	PushConc         int     // the most pushes the emulator had outstanding then
	BridgePID, FnPID int
	StackDir         string
	Rates            []float64
	Duration         time.Duration
}

func measure(ctx context.Context, s *benchStack, o options, progress io.Writer) (*results, error) {
	res := &results{Started: time.Now().UTC(), Duration: o.duration, StackDir: s.dir}
	nc, err := nats.Connect("nats://" + s.nats)
	if err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	os.Setenv("FIRESTORE_EMULATOR_HOST", s.firestore)
	fs, err := firestore.NewClient(ctx, s.project)
	if err != nil {
		return nil, fmt.Errorf("firestore client: %w", err)
	}
	defer fs.Close()
	d := &driver{js: js, fs: fs, store: store.New(fs), progress: progress}
	if err := d.setup(ctx); err != nil {
		return nil, err
	}
	ct, err := s.tasksClient(ctx)
	if err != nil {
		return nil, err
	}
	defer ct.Close()
	if res.BridgePID, err = s.binaryPID("bridge", "bridge"); err != nil {
		return nil, err
	}
	if res.FnPID, err = s.binaryPID("functions", "functions"); err != nil {
		return nil, err
	}
	// Replays scheduled by the latency runs and the storm would be
	// dispatched in the middle of later runs: the queue stays paused until
	// the replay run, and is purged before it.
	if _, err := ct.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: s.queue}); err != nil {
		return nil, fmt.Errorf("pause queue: %w", err)
	}

	fmt.Fprintln(progress, "loadgen: the Pub/Sub emulator's push rate alone (3 000 messages)")
	if res.PushCeiling, res.PushConc, err = pushCeiling(ctx, s, "push-ceiling", 3000, nil, progress); err != nil {
		return nil, err
	}

	// Warm-up: the functions host builds its clients on the first request
	// and the JVMs compile their hot paths; none of that belongs in a row.
	fmt.Fprintln(progress, "loadgen: warm-up, 200 events")
	if seqs, err := d.originals(ctx, 200, tenantEach("warm")); err != nil {
		return nil, err
	} else if _, err := d.offer(ctx, seqs, "llm_provider_timeout: warm-up", 100); err != nil {
		return nil, err
	} else if _, err := d.await(ctx, "warm-up", seqs, o.drain); err != nil {
		return nil, err
	}

	for _, rate := range o.rates {
		n := int(rate * o.duration.Seconds())
		fmt.Fprintf(progress, "loadgen: latency at %.0f events/s offered for %s (%d events, one tenant each)\n", rate, o.duration, n)
		seqs, err := d.originals(ctx, n, tenantEach(fmt.Sprint("lat", rate)))
		if err != nil {
			return nil, err
		}
		cpu0 := s.cpu()
		t0 := time.Now()
		sent, err := d.offer(ctx, seqs, "llm_provider_timeout: upstream timed out", rate)
		if err != nil {
			return nil, err
		}
		sendSecs := time.Since(t0).Seconds()
		created, err := d.await(ctx, fmt.Sprintf("%.0f/s", rate), seqs, o.drain)
		if err != nil {
			return nil, err
		}
		lat, lost := latencies(sent, created)
		end := lastOf(created)
		run := latencyRun{Offered: rate, Sent: float64(n) / sendSecs, N: n, Arrived: n - lost,
			P50: pct(lat, 0.5), P99: pct(lat, 0.99), Max: pct(lat, 1), Drain: end.Sub(lastOf(sent)),
			CPU: s.cpu().since(cpu0, end.Sub(t0))}
		run.ThroughputObserved = float64(run.Arrived) / end.Sub(sent[0]).Seconds()
		fmt.Fprintf(progress, "    p50 %s p99 %s, %d/%d arrived\n", run.P50.Round(time.Millisecond), run.P99.Round(time.Millisecond), run.Arrived, n)
		res.Latency = append(res.Latency, run)
	}

	if res.Storm, err = storm(ctx, d, s, o, progress); err != nil {
		return nil, err
	}
	// The storm's second ceiling, right after it: its transaction as a bare
	// loop, at the concurrency the emulator does best.
	if res.Storm.BareLoop, res.Storm.BareConc, err = bareStormCeiling(ctx, d.store, res.Storm.template, min(o.storm, 3000), progress); err != nil {
		return nil, err
	}
	// The emulator pushes to one subscription at most a couple of messages
	// at a time whatever the endpoint's latency, so the storm's push leg
	// and its transaction add up rather than overlap: the push leg with
	// the bare transaction behind each push is the storm's serial ceiling.
	pushTx, err := newBareStormTx(ctx, d.store, res.Storm.template)
	if err != nil {
		return nil, err
	}
	if res.Storm.PushTx, _, err = pushCeiling(ctx, s, "push-bare-tx", min(o.storm, 2000), pushTx, progress); err != nil {
		return nil, err
	}
	if res.Replay, err = replays(ctx, d, s, o, progress); err != nil {
		return nil, err
	}
	if res.BridgeRSS, err = procStatus(res.BridgePID, "VmHWM"); err != nil {
		return nil, fmt.Errorf("bridge VmHWM: %w", err)
	}
	if res.FnRSS, err = procStatus(res.FnPID, "VmHWM"); err != nil {
		return nil, fmt.Errorf("functions VmHWM: %w", err)
	}
	return res, nil
}

// storm offers o.storm dead messages of one tenant as fast as the client
// publishes them, and checks that each became exactly one entry and was
// counted exactly once.
func storm(ctx context.Context, d *driver, s *benchStack, o options, progress io.Writer) (stormRun, error) {
	tenant := fmt.Sprint("storm-", time.Now().Unix())
	fmt.Fprintf(progress, "loadgen: storm of %d dead messages, tenant %s\n", o.storm, tenant)
	seqs, err := d.originals(ctx, o.storm, func(int) string { return tenant })
	if err != nil {
		return stormRun{}, err
	}
	cpu0 := s.cpu()
	t0 := time.Now()
	sent, err := d.offer(ctx, seqs, "llm_provider_timeout: storm", 0)
	if err != nil {
		return stormRun{}, err
	}
	created, err := d.await(ctx, "storm", seqs, o.stormWait)
	if err != nil {
		return stormRun{}, err
	}
	_, lost := latencies(sent, created)
	end := lastOf(created)
	r := stormRun{N: o.storm, Arrived: o.storm - lost, Lost: lost, Duration: end.Sub(sent[0]), CPU: s.cpu().since(cpu0, end.Sub(t0))}
	// Give redeliveries still in flight a moment to land, then count.
	time.Sleep(2 * time.Second)
	for h := sent[0].Truncate(time.Hour); !h.After(time.Now()); h = h.Add(time.Hour) {
		m, err := d.store.ReadMetrics(ctx, store.Hour(h))
		if err != nil {
			return r, err
		}
		r.Hours = append(r.Hours, store.Hour(h))
		r.MetricTotal += m.ByTenant[tenant]
	}
	entries, err := d.entries(ctx, seqs)
	if err != nil {
		return r, err
	}
	for _, e := range entries {
		if e == nil {
			continue
		}
		if e.Status == store.Held && r.template.ID == "" {
			r.template = *e
		}
		switch e.Status {
		case store.Held:
			r.Held++
		case store.Scheduled:
			r.Scheduled++
		}
	}
	if extra := int(r.MetricTotal) - r.Arrived; extra > 0 {
		r.Duplicates = extra
	}
	r.Exact = r.MetricTotal == int64(r.Arrived) && r.Lost == 0
	fmt.Fprintf(progress, "    %d/%d entries in %s, metrics %d, held %d\n", r.Arrived, r.N, r.Duration.Round(time.Millisecond), r.MetricTotal, r.Held)
	return r, nil
}

// replays measures how late the replay function claims an entry after the
// time its task was scheduled for: Cloud Tasks emulator dispatch, OIDC
// verification and the claim transaction. context_window_overflow has the
// shortest default delay (10 s).
func replays(ctx context.Context, d *driver, s *benchStack, o options, progress io.Writer) (replayRun, error) {
	ct, err := s.tasksClient(ctx)
	if err != nil {
		return replayRun{}, err
	}
	defer ct.Close()
	if _, err := ct.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{Name: s.queue}); err != nil {
		return replayRun{}, fmt.Errorf("purge queue: %w", err)
	}
	if _, err := ct.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{Name: s.queue}); err != nil {
		return replayRun{}, fmt.Errorf("resume queue: %w", err)
	}
	fmt.Fprintf(progress, "loadgen: %d replays (context_window_overflow, 10 s delay)\n", o.replays)
	seqs, err := d.originals(ctx, o.replays, tenantEach(fmt.Sprint("replay-", time.Now().Unix())))
	if err != nil {
		return replayRun{}, err
	}
	if _, err := d.offer(ctx, seqs, "context_window_overflow: prompt is too long", 20); err != nil {
		return replayRun{}, err
	}
	r := replayRun{N: o.replays}
	deadline := time.Now().Add(90 * time.Second)
	var late []time.Duration
	for {
		entries, err := d.entries(ctx, seqs)
		if err != nil {
			return r, err
		}
		late, r.Claimed, r.Replayed = late[:0], 0, 0
		for _, e := range entries {
			if e == nil {
				continue
			}
			for _, t := range e.History {
				if t.To == string(store.Replaying) && !e.NextRetryAt.IsZero() {
					late = append(late, t.At.Sub(e.NextRetryAt))
					r.Claimed++
					break
				}
			}
			if e.Status == store.Replayed || e.Status == store.Recovered {
				r.Replayed++
			}
		}
		if r.Claimed == r.N || time.Now().After(deadline) {
			break
		}
		fmt.Fprintf(progress, "    replays claimed %d/%d\n", r.Claimed, r.N)
		time.Sleep(3 * time.Second)
	}
	slices.Sort(late)
	r.P50, r.P99, r.Max = pct(late, 0.5), pct(late, 0.99), pct(late, 1)
	fmt.Fprintf(progress, "    lateness p50 %s p99 %s (%d claimed, %d replayed)\n", r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Claimed, r.Replayed)
	return r, nil
}

// cpuSample is the CPU time each process group used so far.
type cpuSample map[string]time.Duration

// cpuShare is the CPU each group used over a run, in cores (1.0 = one core
// busy the whole run).
type cpuShare map[string]float64

func (s *benchStack) cpu() cpuSample {
	out := cpuSample{}
	for _, p := range s.procs {
		out[p.Name] = stack.GroupCPU(p.Pgid)
	}
	return out
}

func (now cpuSample) since(before cpuSample, wall time.Duration) cpuShare {
	out := cpuShare{}
	for k, v := range now {
		out[k] = (v - before[k]).Seconds() / wall.Seconds()
	}
	return out
}
