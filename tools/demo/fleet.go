package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/tools/stack"
	"github.com/jsdlq/jsdlq/tools/tsagent"
)

// The demo's fleet: its work stream, its binaries and its agents.

// prepareStreams creates the work stream (kept across runs: its sequences,
// hence entry ids and replay task names, never repeat) and notes where this
// run's advisories and records begin.
func (d *demo) prepareStreams(ctx context.Context) error {
	cfg := jetstream.StreamConfig{Name: workStream, Subjects: []string{"agents.*.tasks.>"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: time.Hour, AllowDirect: true}
	if _, err := d.js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("work stream %s: %w", workStream, err)
	}
	for _, name := range []string{event.DefaultAdvisoryStream, event.DefaultRecordStream} {
		var info *jetstream.StreamInfo
		for i := 0; ; i++ {
			s, err := d.js.Stream(ctx, name)
			if err == nil {
				info, err = s.Info(ctx)
			}
			if err == nil {
				break
			}
			if i == 50 {
				return fmt.Errorf("capture stream %s (the bridge creates it; is it running? make status): %w", name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		d.captureFrom[name] = info.State.LastSeq + 1
		d.cursor[name] = info.State.LastSeq
	}
	d.logf("work stream %s ready (subjects agents.*.tasks.>, WorkQueue, dedup window 1h); capture streams from %v", workStream, d.captureFrom)
	return nil
}

func (d *demo) build(ctx context.Context) error {
	root := filepath.Dir(filepath.Dir(d.binDir))
	// The Go agent and dlqctl, and the fleet's TypeScript agent on the
	// TypeScript agentkit (npm ci when the lockfile changed, and tsc): two
	// toolchains, built side by side.
	built := make(chan error, 1)
	go func() {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", d.binDir+"/", "./examples/agent", "./cmd/dlqctl")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			built <- fmt.Errorf("go build the agent and dlqctl: %w", err)
			return
		}
		built <- nil
	}()
	dir, err := tsagent.Prepare(ctx, root, io.Discard) // its error carries npm's output
	if err != nil {
		err = fmt.Errorf("the TypeScript agent: %w", err)
	}
	d.tsDir = dir
	return errors.Join(<-built, err)
}

func (d *demo) agentLog(name string) string {
	return filepath.Join(d.logDir, "demo-agent-"+name+".log")
}

func (d *demo) startAgents(ctx context.Context) error {
	triageArgs, triageEnv, err := d.triageAgent(ctx)
	if err != nil {
		return err
	}
	for i, name := range fleet {
		logFile := d.agentLog(name)
		_ = os.Remove(logFile)
		// AckWait is BackOff's first entry, as the server sets it: a first
		// delivery is redelivered after 1 s without an ack (ackDeadline),
		// so the long tasks (longWork) need agentkit's keep-alive.
		args := []string{"--name", name, "--stream", workStream, "--create-stream=false", "--max-deliver", "3", "--backoff", "1s,2s",
			"--ack-wait", ackDeadline.String(), "--work-time", "20ms", "--seed", strconv.FormatUint(d.o.seed+uint64(i)+1, 10)}
		var env []string
		if name == event.DefaultTriageAgent { // it answers the triage tasks
			args, env = append(args, triageArgs...), triageEnv
		}
		path := filepath.Join(d.binDir, "agent")
		if name == typescriptAgent { // same flags, same logs, the TypeScript kit
			path, args = "node", append([]string{filepath.Join(d.tsDir, tsagent.AgentScript)}, args...)
		}
		p, err := stack.Start(ctx, stack.Spec{Name: "agent-" + name, Path: path, LogFile: logFile, Watch: true,
			Args: args, Env: env})
		if err != nil {
			return err
		}
		d.agents = append(d.agents, p)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range fleet {
		for !logHas(d.agentLog(name), `"message":"agent ready"`) {
			if time.Now().After(deadline) {
				return fmt.Errorf("agent %s not ready after 30s; see %s", name, d.agentLog(name))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	d.logf("fleet of %d agents ready (examples/agent: MaxDeliver 3, BackOff 1s/2s (AckWait %s), MaxAckPending 1; one task per agent and phase works %s, kept alive by agentkit; %s answers the triage tasks; %s runs on the TypeScript agentkit; logs .local/log/demo-agent-*.log)",
		len(fleet), ackDeadline, longWork, event.DefaultTriageAgent, typescriptAgent)
	return nil
}

func (d *demo) stopAgents() {
	for _, p := range d.agents {
		_ = p.Stop()
	}
	d.agents = nil
}

func logHas(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), s)
}

// triageAgent is how the fleet's triage agent answers: as a user's would,
// through the console's triage endpoint (the example agent knows no other
// way), proving the identity the local console accepts with a token the
// Cloud Tasks emulator signs (stack.Endpoints.MintToken).
func (d *demo) triageAgent(ctx context.Context) (args, env []string, err error) {
	consoleURL := os.Getenv("CONSOLE_URL")
	if consoleURL == "" {
		return nil, nil, errors.New("CONSOLE_URL is not set: the triage agent answers through the console's triage endpoint; start the stack with its console (make up)")
	}
	e := stack.Endpoints{Project: os.Getenv("GOOGLE_CLOUD_PROJECT"), CloudTasks: os.Getenv("CLOUD_TASKS_EMULATOR_HOST"), Queue: os.Getenv("TASKS_QUEUE")}
	token, err := e.MintToken(ctx, e.TriageAccount(), consoleURL)
	if err != nil {
		return nil, nil, fmt.Errorf("the triage agent's token: %w", err)
	}
	return []string{"--triage-url", consoleURL}, []string{"TRIAGE_TOKEN=" + token}, nil
}
