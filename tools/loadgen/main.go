// Command loadgen measures the whole pipeline on a private local stack it
// starts on free ports (bridge, functions host, nats-server, the Cloud Tasks
// emulator and the gcloud Firestore and Pub/Sub emulators, each in its own
// watched process group) and writes docs/PERFORMANCE.md together with the Go
// benchmark results `make bench` collected before it:
//
//   - end-to-end latency advisory → Firestore entry at fixed offered rates;
//   - a storm of dead messages of one tenant in one hour bucket: duration,
//     lost, duplicates, metrics exact;
//   - replay dispatch lateness (schedule time → replay claims the entry);
//   - peak RSS (VmHWM) of the bridge and functions binaries, and the CPU
//     every process used, to show what the shared cores were doing.
//
// Runs are bounded in count and time; everything started is stopped on the
// way out, also on an error or Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	root, out, goBench, workDir string
	rates                       []float64
	duration, drain, stormWait  time.Duration
	storm, replays              int
}

func main() {
	var o options
	var rates string
	flag.StringVar(&o.root, "root", ".", "repository root (binaries are built from it)")
	flag.StringVar(&o.out, "out", "docs/PERFORMANCE.md", "report to write (empty: stdout only)")
	flag.StringVar(&o.goBench, "go-bench", "", "output of `go test -bench` to put into the report")
	flag.StringVar(&o.workDir, "work-dir", "", "directory for binaries, logs and data (default: a temporary one, removed afterwards)")
	flag.StringVar(&rates, "rates", "50,200,1000", "offered rates (events/s) of the latency runs (empty: none)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each latency run")
	flag.DurationVar(&o.drain, "drain", 3*time.Minute, "how long a latency run may take to land after its last advisory")
	flag.IntVar(&o.storm, "storm", 10000, "dead messages in the storm (one tenant, one hour)")
	flag.DurationVar(&o.stormWait, "storm-wait", 4*time.Minute, "how long the storm may take to land")
	flag.IntVar(&o.replays, "replays", 100, "replays in the lateness run")
	flag.Parse()
	for _, r := range strings.FieldsFunc(rates, func(c rune) bool { return c == ',' }) {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "loadgen: -rates: %q is not a positive number\n", r)
			os.Exit(2)
		}
		o.rates = append(o.rates, v)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A hard bound on the whole run, whatever the stack does.
	ctx, cancel := context.WithTimeout(ctx, 12*time.Minute)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return err
	}
	dir := o.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "jsdlq-loadgen-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	progress := os.Stderr
	fmt.Fprintf(progress, "loadgen: private stack under %s\n", dir)
	s, err := startStack(ctx, root, dir, progress)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(progress, "loadgen: stopping the stack")
		s.stop()
	}()
	res, err := measure(ctx, s, o, progress)
	if err != nil {
		return fmt.Errorf("%w (logs: %s)", err, filepath.Join(dir, "log"))
	}
	var bench *goBench
	if o.goBench != "" {
		if bench, err = parseGoBench(o.goBench); err != nil {
			return err
		}
	}
	report, err := render(ctx, root, o, res, bench)
	if err != nil {
		return err
	}
	if o.out == "" {
		fmt.Print(report)
		return nil
	}
	out := o.out
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	if err := os.WriteFile(out, []byte(keepFixes(out, report)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(progress, "loadgen: wrote %s\n", out)
	return nil
}
