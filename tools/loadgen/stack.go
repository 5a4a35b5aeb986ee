package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jsdlq/jsdlq/shared/clientopt"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/tools/stack"
)

// benchStack is a private local stack on free ports: the driver never
// touches the default ports `make up` uses, so both can run at once.
type benchStack struct {
	root, dir                                  string
	project, queue                             string
	firestore, pubsub, nats, tasks, fn, brAddr string
	procs                                      []*stack.Process
	byName                                     map[string]*stack.Process
	progress                                   io.Writer
}

const (
	project  = "jsdlq-bench"
	location = "us-central1"
	topicID  = "dlq-events"
)

func startStack(ctx context.Context, root, dir string, progress io.Writer) (_ *benchStack, err error) {
	s := &benchStack{root: root, dir: dir, project: project, byName: map[string]*stack.Process{}, progress: progress,
		queue: fmt.Sprintf("projects/%s/locations/%s/queues/dlq-replay", project, location)}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if err := stack.CheckGcloudEmulators(); err != nil {
		return nil, err
	}
	for _, b := range stack.PipelineBinaries {
		fmt.Fprintf(progress, "  build %-20s %s\n", b.Name, b.Pkg)
		if err := stack.Build(ctx, root, s.bin(b.Name), b.Pkg); err != nil {
			return nil, err
		}
	}
	ptrs := []*string{&s.firestore, &s.pubsub, &s.nats, &s.fn, &s.brAddr}
	addrs, err := stack.FreeAddrs(len(ptrs))
	if err != nil {
		return nil, err
	}
	taken := map[string]bool{}
	for i, p := range ptrs {
		*p = addrs[i]
		taken[*p] = true
	}
	if s.tasks, err = stack.FreeAddrPair(taken); err != nil {
		return nil, err
	}
	logf := func(name string) string { return filepath.Join(dir, "log", name+".log") }
	if err := s.start(ctx, stack.FirestoreEmulator(s.firestore, logf("firestore"))); err != nil {
		return nil, err
	}
	if err := s.start(ctx, stack.PubSubEmulator(s.pubsub, logf("pubsub"))); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(s.nats)
	if err := s.start(ctx, stack.Spec{Name: "nats", Path: s.bin("nats-server"), Addr: s.nats, LogFile: logf("nats"),
		Args: []string{"-js", "-a", host, "-p", port, "-sd", filepath.Join(dir, "nats"), "-n", "jsdlq-bench"}}); err != nil {
		return nil, err
	}
	if err := s.start(ctx, stack.Spec{Name: "cloudtasks", Path: s.bin("cloudtasks-emulator"), Addr: s.tasks, LogFile: logf("cloudtasks"),
		// In memory: with --data-dir every task operation is fsynced, and the
		// figures would measure this VM's disk rather than the pipeline.
		Args: []string{"--host-port=" + s.tasks}}); err != nil {
		return nil, err
	}
	_, fnPort, _ := net.SplitHostPort(s.fn)
	if err := s.start(ctx, stack.Spec{Name: "functions", Path: s.bin("functions"), Addr: s.fn, LogFile: logf("functions"),
		Env: append(s.clientEnv(), "PORT="+fnPort)}); err != nil {
		return nil, err
	}
	if err := s.provision(ctx); err != nil {
		return nil, err
	}
	_, brPort, _ := net.SplitHostPort(s.brAddr)
	if err := s.start(ctx, stack.Spec{Name: "bridge", Path: s.bin("bridge"), Addr: s.brAddr, ReadyPath: "/healthz", LogFile: logf("bridge"),
		Env: append(s.clientEnv(), "PORT="+brPort)}); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *benchStack) bin(name string) string { return filepath.Join(s.dir, "bin", name) }

func (s *benchStack) start(ctx context.Context, spec stack.Spec) error {
	spec.Watch = true // the group dies with the driver, however it ends
	t0 := time.Now()
	fmt.Fprintf(s.progress, "  start %-11s on %s ", spec.Name, spec.Addr)
	p, err := stack.Start(ctx, spec)
	if err != nil {
		fmt.Fprintln(s.progress, "FAILED")
		return err
	}
	fmt.Fprintf(s.progress, "ready in %.1fs (pgid %d)\n", time.Since(t0).Seconds(), p.Pgid)
	s.procs = append(s.procs, p)
	s.byName[spec.Name] = p
	return nil
}

// stop ends every process group started here, newest first.
func (s *benchStack) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].Stop(); err != nil {
			fmt.Fprintf(s.progress, "  stop %s: %v\n", s.procs[i].Name, err)
		}
	}
	s.procs = nil
}

func (s *benchStack) clientEnv() []string {
	return stack.Endpoints{Project: s.project, Firestore: s.firestore, PubSub: s.pubsub, CloudTasks: s.tasks,
		NATS: s.nats, Functions: s.fn, Queue: s.queue}.ClientEnv()
}

// provision creates what Terraform creates in a project: the topic with its
// push subscription to /Classify (and the dead-letter topic with a
// subscription), the notifications topic with a subscription, and the replay queue at Cloud Tasks' documented ceiling of
// 500 dispatches/s, so the queue is not what the figures measure.
func (s *benchStack) provision(ctx context.Context) error {
	os.Setenv("PUBSUB_EMULATOR_HOST", s.pubsub)
	ps, err := pubsub.NewClient(ctx, s.project)
	if err != nil {
		return fmt.Errorf("pubsub client: %w", err)
	}
	defer ps.Close()
	topic := fmt.Sprintf("projects/%s/topics/%s", s.project, topicID)
	dead := topic + "-dead"
	// The notifications topic too: without it the first notification (the
	// storm's breaker_opened) stays pending, and every flush after a commit
	// claims it, fails to publish it and releases it again, a transaction
	// pair per entry on one outbox document that no deployment has.
	notes := fmt.Sprintf("projects/%s/topics/%s", s.project, event.DefaultNotificationsTopic)
	// And the change feed's, for the same reason: every transition stages
	// a row.
	changes := fmt.Sprintf("projects/%s/topics/%s", s.project, event.DefaultChangesTopic)
	for _, t := range []string{topic, dead, notes, changes} {
		if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: t}); err != nil {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	for _, sub := range []*pubsubpb.Subscription{
		{Name: fmt.Sprintf("projects/%s/subscriptions/dead-hold", s.project), Topic: dead},
		{Name: fmt.Sprintf("projects/%s/subscriptions/notifications-hold", s.project), Topic: notes},
		{Name: fmt.Sprintf("projects/%s/subscriptions/changes-hold", s.project), Topic: changes},
		stack.ClassifySubscription(fmt.Sprintf("projects/%s/subscriptions/classify-push", s.project), topic, dead, s.fn),
	} {
		if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, sub); err != nil {
			return fmt.Errorf("create subscription %s: %w", sub.Name, err)
		}
	}
	ct, err := s.tasksClient(ctx)
	if err != nil {
		return err
	}
	defer ct.Close()
	_, err = ct.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{
		Parent: fmt.Sprintf("projects/%s/locations/%s", s.project, location),
		Queue: &cloudtaskspb.Queue{Name: s.queue,
			RateLimits:  &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 500, MaxConcurrentDispatches: 100},
			RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: 10, MinBackoff: durationpb.New(time.Second), MaxBackoff: durationpb.New(60 * time.Second)}},
	})
	if err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	return nil
}

func (s *benchStack) tasksClient(ctx context.Context) (*cloudtasks.Client, error) {
	c, err := cloudtasks.NewClient(ctx, clientopt.CloudTasksOptions(s.tasks)...)
	if err != nil {
		return nil, fmt.Errorf("cloud tasks client: %w", err)
	}
	return c, nil
}

// binaryPID finds the server binary inside a watched process group (the
// group leader is the watchdog shell).
func (s *benchStack) binaryPID(name, exe string) (int, error) {
	p := s.byName[name]
	if p == nil {
		return 0, fmt.Errorf("%s not started", name)
	}
	pids, err := stack.GroupPIDs(p.Pgid)
	if err != nil {
		return 0, err
	}
	for _, pid := range pids {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && filepath.Base(target) == exe {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("%s: no process %s in group %d", name, exe, p.Pgid)
}

// procStatus reads one "kB" field of /proc/PID/status in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New(field + " not found")
}
