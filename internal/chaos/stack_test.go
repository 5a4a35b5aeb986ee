package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/clientopt"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
	"github.com/jsdlq/jsdlq/tools/stack"
)

const (
	location   = "us-central1"
	topicID    = "dlq-events"
	workStream = "TASKS"
)

// chaosStack is the whole pipeline as separate processes, each in a
// process group of its own, so a scenario can SIGKILL, SIGSTOP or restart
// any one of them.
type chaosStack struct {
	t       *testing.T
	dir     string
	project string // of Firestore, Pub/Sub and Cloud Tasks alike, new for each run
	queue   string
	addr    map[string]string // firestore, pubsub, nats, tasks, functions, bridge
	specs   map[string]stack.Spec
	procs   map[string]*stack.Process
	mu      sync.Mutex

	fs *firestore.Client
	nc *nats.Conn
	js jetstream.JetStream
	ct *cloudtasks.Client
}

// startStack builds the binaries (once per test binary) and starts every
// server on free ports. The bridge's ack wait is 5 s (default 45 s) and the
// push subscription retries after 1–10 s (Terraform: 10–600 s) so that
// recovery fits in a test; the mechanisms are the production ones.
//
// With ownFirestore (the full form, which pauses it) Firestore is an
// emulator of the stack's own too; otherwise the emulator the test binary
// shares serves the run's project, one JVM fewer to start.
func startStack(t *testing.T, ownFirestore bool) *chaosStack {
	t.Helper()
	if err := stack.CheckGcloudEmulators(); err != nil {
		t.Skipf("gcloud emulators unavailable: %v", err)
	}
	project := testenv.Project(t)
	s := &chaosStack{t: t, dir: t.TempDir(), addr: map[string]string{}, specs: map[string]stack.Spec{}, procs: map[string]*stack.Process{},
		project: project, queue: fmt.Sprintf("projects/%s/locations/%s/queues/dlq-replay", project, location)}
	t.Cleanup(s.stopAll)
	// The binaries build while the gcloud emulators start: both take
	// seconds, and neither needs the other.
	bins := make([]string, len(stack.PipelineBinaries))
	buildErrs := make([]error, len(stack.PipelineBinaries))
	var builds sync.WaitGroup
	for i, b := range stack.PipelineBinaries {
		builds.Go(func() { bins[i], buildErrs[i] = testenv.BuildOnce(b.Pkg) })
	}
	t.Cleanup(builds.Wait) // a failed start must not leave a build behind
	names := []string{"pubsub", "nats", "functions", "bridge"}
	if ownFirestore {
		names = append(names, "firestore")
	}
	addrs, err := stack.FreeAddrs(len(names))
	if err != nil {
		t.Fatal(err)
	}
	taken := map[string]bool{}
	for i, n := range names {
		s.addr[n] = addrs[i]
		taken[addrs[i]] = true
	}
	// The Cloud Tasks emulator also takes the next port, for its token keys.
	a, err := stack.FreeAddrPair(taken)
	if err != nil {
		t.Fatal(err)
	}
	s.addr["tasks"] = a
	logf := func(name string) string { return filepath.Join(s.logDir(), name+".log") }
	if !ownFirestore {
		s.addr["firestore"] = testenv.FirestoreHost(t)
	}
	s.specs["firestore"] = stack.FirestoreEmulator(s.addr["firestore"], logf("firestore"))
	s.specs["pubsub"] = stack.PubSubEmulator(s.addr["pubsub"], logf("pubsub"))
	// `make test` points FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST
	// at its shared emulators, and the client libraries prefer those
	// variables to an explicit endpoint: this test's clients and children
	// must use the emulators it restarts.
	t.Setenv("FIRESTORE_EMULATOR_HOST", s.addr["firestore"])
	t.Setenv("PUBSUB_EMULATOR_HOST", s.addr["pubsub"])
	t.Setenv("CLOUD_TASKS_EMULATOR_HOST", s.addr["tasks"])
	if ownFirestore {
		s.start("firestore")
	}
	s.start("pubsub")

	builds.Wait()
	if err := errors.Join(buildErrs...); err != nil {
		t.Fatal(err)
	}
	bin := map[string]string{}
	for i, b := range stack.PipelineBinaries {
		bin[b.Name] = bins[i]
	}
	natsHost, natsPort, _ := net.SplitHostPort(s.addr["nats"])
	_, fnPort, _ := net.SplitHostPort(s.addr["functions"])
	_, brPort, _ := net.SplitHostPort(s.addr["bridge"])
	s.specs["nats"] = stack.Spec{Name: "nats", Path: bin["nats-server"], Addr: s.addr["nats"], LogFile: logf("nats"),
		Args: []string{"-js", "-a", natsHost, "-p", natsPort, "-sd", filepath.Join(s.dir, "nats"), "-n", "jsdlq-chaos"}}
	s.specs["tasks"] = stack.Spec{Name: "cloudtasks", Path: bin["cloudtasks-emulator"], Addr: s.addr["tasks"], LogFile: logf("cloudtasks"),
		Args: []string{"--host-port=" + s.addr["tasks"], "--data-dir=" + filepath.Join(s.dir, "cloudtasks")}}
	s.specs["functions"] = stack.Spec{Name: "functions", Path: bin["functions"], Addr: s.addr["functions"], LogFile: logf("functions"),
		Env: append(s.clientEnv(), "PORT="+fnPort)}
	s.specs["bridge"] = stack.Spec{Name: "bridge", Path: bin["bridge"], Addr: s.addr["bridge"], ReadyPath: "/healthz", LogFile: logf("bridge"),
		Env: append(s.clientEnv(), "PORT="+brPort, "BRIDGE_ACK_WAIT=5s", fmt.Sprint("RECORD_STREAM_MAX_MSGS=", recordCapacity()))}
	for _, n := range []string{"nats", "tasks", "functions"} {
		s.start(n)
	}
	ctx := context.Background()
	if s.fs, err = firestore.NewClient(ctx, s.project, option.WithEndpoint(s.addr["firestore"]), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))); err != nil {
		t.Fatal(err)
	}
	if s.ct, err = cloudtasks.NewClient(ctx, clientopt.CloudTasksOptions(s.addr["tasks"])...); err != nil {
		t.Fatal(err)
	}
	if s.nc, err = nats.Connect("nats://"+s.addr["nats"], nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: workStream, Subjects: []string{"agents.>"},
		Storage: jetstream.FileStorage, AllowDirect: true, Duplicates: time.Hour}); err != nil {
		t.Fatalf("create %s: %v", workStream, err)
	}
	// Replays due after about a second instead of 30 s: the scenarios
	// measure what survives, not the production delays.
	const transient = "delay: {base: 30s, factor: 2, max: 300s}\n    max_replays: 3"
	def := string(triage.DefaultYAML())
	if !strings.Contains(def, transient) {
		t.Fatalf("the default policy's transient strategy changed; update the chaos override")
	}
	policy := strings.Replace(def, transient, "delay: {base: 1s, factor: 1, max: 1s}\n    max_replays: 3", 1)
	if _, err := store.New(s.fs).SavePolicyOverride(ctx, []byte(policy)); err != nil {
		t.Fatalf("policy override: %v", err)
	}
	s.provisionPubSub()
	s.createQueue()
	s.start("bridge")
	return s
}

func (s *chaosStack) logDir() string {
	if d := os.Getenv("JSDLQ_TEST_LOG_DIR"); d != "" {
		d = filepath.Join(d, "chaos")
		if err := os.MkdirAll(d, 0o755); err == nil {
			return d
		}
	}
	return filepath.Join(s.dir, "log")
}

func (s *chaosStack) endpoints() stack.Endpoints {
	return stack.Endpoints{Project: s.project, Firestore: s.addr["firestore"], PubSub: s.addr["pubsub"],
		CloudTasks: s.addr["tasks"], NATS: s.addr["nats"], Functions: s.addr["functions"], Queue: s.queue}
}

func (s *chaosStack) clientEnv() []string { return s.endpoints().ClientEnv() }

// tasksSA is the service account the functions host accepts replay tasks
// from (and the stack's tasks are dispatched as).
func (s *chaosStack) tasksSA() string { return s.endpoints().TasksAccount() }

// start starts (or restarts) a server and waits until it is ready. A port
// just released by a killed process may linger a moment: retried.
func (s *chaosStack) start(name string) {
	s.t.Helper()
	spec := s.specs[name]
	spec.Watch = true
	var p *stack.Process
	var err error
	for i := 0; i < 40; i++ {
		if p, err = stack.Start(context.Background(), spec); err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	s.mu.Lock()
	s.procs[name] = p
	s.mu.Unlock()
}

// signal sends sig to the server's whole process group.
func (s *chaosStack) signal(name string, sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	if err := syscall.Kill(-p.Pgid, sig); err != nil {
		s.t.Fatalf("kill -%d %s: %v", sig, name, err)
	}
}

// kill SIGKILLs a server's group and waits until it is gone.
func (s *chaosStack) kill(name string) {
	s.t.Helper()
	s.signal(name, syscall.SIGKILL)
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); stack.GroupAlive(p.Pgid); {
		if time.Now().After(deadline) {
			s.t.Fatalf("%s survived SIGKILL", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *chaosStack) stopAll() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.fs != nil {
		s.fs.Close()
	}
	if s.ct != nil {
		s.ct.Close()
	}
	for _, n := range []string{"bridge", "functions", "tasks", "nats", "pubsub", "firestore"} {
		s.mu.Lock()
		p := s.procs[n]
		s.mu.Unlock()
		if p != nil {
			_ = syscall.Kill(-p.Pgid, syscall.SIGCONT) // a paused group cannot exit
			_ = p.Stop()
		}
	}
}

// pushMaxBackoff is the push subscription's longest wait before it retries
// a push that failed.
const pushMaxBackoff = 10 * time.Second

// provisionPubSub creates what Terraform (and the local stack after an
// emulator restart) creates: the topic, the push subscription to /Classify
// with its dead-letter topic, and a subscription holding dead letters.
func (s *chaosStack) provisionPubSub() {
	s.t.Helper()
	ctx := context.Background()
	ps, err := pubsub.NewClient(ctx, s.project, option.WithEndpoint(s.addr["pubsub"]), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		s.t.Fatalf("pubsub client: %v", err)
	}
	defer ps.Close()
	topic := fmt.Sprintf("projects/%s/topics/%s", s.project, topicID)
	dead := topic + "-dead"
	for _, tp := range []string{topic, dead} {
		if _, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: tp}); err != nil && status.Code(err) != codes.AlreadyExists {
			s.t.Fatalf("create topic %s: %v", tp, err)
		}
	}
	for _, sub := range []*pubsubpb.Subscription{
		{Name: fmt.Sprintf("projects/%s/subscriptions/dead-hold", s.project), Topic: dead},
		{Name: fmt.Sprintf("projects/%s/subscriptions/classify-push", s.project), Topic: topic,
			PushConfig:         &pubsubpb.PushConfig{PushEndpoint: stack.ClassifyPushEndpoint(s.addr["functions"], topic)},
			AckDeadlineSeconds: 60,
			RetryPolicy:        &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(time.Second), MaximumBackoff: durationpb.New(pushMaxBackoff)},
			DeadLetterPolicy:   &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dead, MaxDeliveryAttempts: 100}},
	} {
		if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, sub); err != nil && status.Code(err) != codes.AlreadyExists {
			s.t.Fatalf("create subscription %s: %v", sub.Name, err)
		}
	}
}

func (s *chaosStack) createQueue() {
	s.t.Helper()
	_, err := s.ct.CreateQueue(context.Background(), &cloudtaskspb.CreateQueueRequest{
		Parent: fmt.Sprintf("projects/%s/locations/%s", s.project, location),
		Queue: &cloudtaskspb.Queue{Name: s.queue,
			RateLimits:  &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 500, MaxConcurrentDispatches: 50},
			RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: 50, MinBackoff: durationpb.New(time.Second), MaxBackoff: durationpb.New(5 * time.Second)}},
	})
	if err != nil {
		s.t.Fatalf("create queue: %v", err)
	}
}

func (s *chaosStack) setQueuePaused(paused bool) {
	s.t.Helper()
	var err error
	if paused {
		_, err = s.ct.PauseQueue(context.Background(), &cloudtaskspb.PauseQueueRequest{Name: s.queue})
	} else {
		_, err = s.ct.ResumeQueue(context.Background(), &cloudtaskspb.ResumeQueueRequest{Name: s.queue})
	}
	if err != nil {
		s.t.Fatalf("pause=%v queue: %v", paused, err)
	}
}

// token has the Cloud Tasks emulator mint a genuine OIDC token for the
// functions host (as on every dispatch) and returns the Authorization header.
func (s *chaosStack) token() string {
	s.t.Helper()
	capture := fmt.Sprintf("projects/%s/locations/%s/queues/capture", s.project, location)
	if _, err := s.ct.CreateQueue(context.Background(), &cloudtaskspb.CreateQueueRequest{
		Parent: fmt.Sprintf("projects/%s/locations/%s", s.project, location), Queue: &cloudtaskspb.Queue{Name: capture}}); status.Code(err) != codes.AlreadyExists && err != nil {
		s.t.Fatalf("create capture queue: %v", err)
	}
	return testenv.MintToken(s.t, s.ct, capture, s.tasksSA(), "http://"+s.addr["functions"]+"/Replay")
}

// post sends body to the functions host at path with authorization authz.
func (s *chaosStack) post(path, authz string, header map[string]string, body any) (int, []byte) {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr["functions"]+path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, []byte(out.String())
}

func deleteReq(name string) *cloudtaskspb.DeleteTaskRequest {
	return &cloudtaskspb.DeleteTaskRequest{Name: name}
}
