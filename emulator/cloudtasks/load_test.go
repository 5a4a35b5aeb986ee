package cloudtasks_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/auth/keyset"
	"github.com/jsdlq/jsdlq/shared/obs"
)

// createConcurrently creates tasks with a few client goroutines, in the
// (shuffled) order given, and returns the created tasks by name.
func createConcurrently(t testing.TB, e *emu, queue string, tasks []*cloudtaskspb.Task) map[string]*cloudtaskspb.Task {
	t.Helper()
	var mu sync.Mutex
	created := map[string]*cloudtaskspb.Task{}
	var wg sync.WaitGroup
	errs := make(chan error, len(tasks))
	next := make(chan *cloudtaskspb.Task)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tk := range next {
				got, err := e.Client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: tk})
				if err != nil {
					errs <- fmt.Errorf("CreateTask(%s) = %w", tk.Name, err)
					continue
				}
				mu.Lock()
				created[got.Name] = got
				mu.Unlock()
			}
		}()
	}
	for _, tk := range tasks {
		next <- tk
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return created
}

// 1 000 tasks scheduled over ~3 s are each dispatched exactly once, in
// schedule order. The queue dispatches one at a time so the order the target
// sees is the order the emulator chose; it is paused while the tasks are
// created so none can become due before an earlier one exists.
func TestThousandTasksInScheduleOrder(t *testing.T) {
	t.Parallel()
	logs := &testenv.LogBuffer{}
	e := startEmu(t, cloudtasks.WithLogger(obs.NewLogger(logs)))
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, `"dispatch"`) && !strings.Contains(l, `"outcome":"success"`) {
					t.Log(l)
				}
			}
		}
	})
	tg := newTarget(t, nil)
	q := e.queue(t, "thousand", &cloudtaskspb.RateLimits{MaxConcurrentDispatches: 1}, nil)
	e.pause(t, q)
	const n = 1000
	base := time.Now().Add(time.Second)
	var tasks []*cloudtaskspb.Task
	for i := 0; i < n; i++ {
		// 300 distinct instants 10 ms apart: most instants carry 3-4 tasks (ties).
		tk := httpTask(fmt.Sprintf("%s/tasks/t%04d", q, i), tg.URL)
		tk.ScheduleTime = timestamppb.New(base.Add(time.Duration(i%300) * 10 * time.Millisecond))
		tasks = append(tasks, tk)
	}
	rand.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	// The schedule_time CreateTask returns is the one to honour: a time
	// already past when the task is created (a slow run) becomes "now".
	want := map[string]time.Time{}
	late := 0
	for name, c := range createConcurrently(t, e, q, tasks) {
		want[shortID(name)] = c.ScheduleTime.AsTime()
		if !c.ScheduleTime.AsTime().Equal(base.Add(time.Duration(mustAtoi(t, shortID(name)[1:])%300) * 10 * time.Millisecond).Truncate(time.Microsecond)) {
			late++
		}
	}
	if late > 0 {
		t.Logf("%d tasks were created after their requested time and scheduled at creation", late)
	}
	e.resume(t, q)
	testenv.WaitUntil(t, 40*time.Second, "1000 dispatches", func() bool { return tg.count() >= n })
	time.Sleep(100 * time.Millisecond) // a duplicate would arrive now
	hits := tg.snapshot()
	if len(hits) != n {
		t.Errorf("dispatches = %d, want %d", len(hits), n)
	}
	seen := map[string]int{}
	var prev time.Time
	for i, h := range hits {
		id := h.header.Get(cloudtasks.HeaderTaskName)
		seen[id]++
		at, ok := want[id]
		if !ok {
			t.Fatalf("dispatch %d of unknown task %q", i, id)
		}
		if at.Before(prev) {
			t.Errorf("dispatch %d: %s scheduled %v came after a task scheduled %v", i, id, at.Format("15:04:05.000"), prev.Format("15:04:05.000"))
		}
		prev = at
		eta, _ := strconv.ParseFloat(h.header.Get(cloudtasks.HeaderETA), 64)
		if d := float64(at.UnixNano())/1e9 - eta; d > 1e-5 || d < -1e-5 {
			t.Errorf("dispatch %d: %s = %f, want %f", i, cloudtasks.HeaderETA, eta, float64(at.UnixNano())/1e9)
		}
		if h.at.Before(at) {
			t.Errorf("dispatch %d: %s arrived at %v, before its schedule time %v", i, id, h.at, at)
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("task %s dispatched %d times, want exactly once", id, seen[id])
		}
	}
	if _, err := e.Client.ListTasks(context.Background(), &cloudtaskspb.ListTasksRequest{Parent: q}).Next(); err != iterator.Done {
		t.Errorf("ListTasks(after all succeeded) = %v, want empty", err)
	}
}

// Stopping the emulator in the middle of a schedule and starting a new one on
// the same data directory loses nothing: the queue and its config come back,
// tasks due while it was down are dispatched on start, later ones on time,
// the OIDC key (and so the JWKS) is the same, and name reservations hold.
func TestRestartWithDataDirLosesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tg := newTarget(t, nil)
	e1 := startEmu(t, cloudtasks.WithDataDir(dir))
	rc := &cloudtaskspb.RetryConfig{MaxAttempts: 7, MinBackoff: dur(time.Second), MaxBackoff: dur(10 * time.Second), MaxDoublings: 2}
	q := e1.queue(t, "durable", &cloudtaskspb.RateLimits{MaxDispatchesPerSecond: 200}, rc)
	q1, err := e1.Client.GetQueue(context.Background(), &cloudtaskspb.GetQueueRequest{Name: q})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	start := time.Now()
	var tasks []*cloudtaskspb.Task
	for i := 0; i < n; i++ {
		tk := httpTask(fmt.Sprintf("%s/tasks/r%02d", q, i), tg.URL)
		tk.ScheduleTime = timestamppb.New(start.Add(200*time.Millisecond + time.Duration(i)*25*time.Millisecond))
		tk.GetHttpRequest().AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{ServiceAccountEmail: "sa@test-project.iam.gserviceaccount.com"}}
		tasks = append(tasks, tk)
	}
	createConcurrently(t, e1, q, tasks)
	testenv.WaitUntil(t, 20*time.Second, "some dispatches before the stop", func() bool { return tg.count() >= 10 })
	jwks1 := httpGet(t, e1.JWKSURL)
	e1.Stop()
	stoppedAt := tg.count()
	time.Sleep(400 * time.Millisecond) // several tasks fall due while down

	restartAt := time.Now()
	e2 := startEmu(t, cloudtasks.WithDataDir(dir))
	q2, err := e2.Client.GetQueue(context.Background(), &cloudtaskspb.GetQueueRequest{Name: q})
	if err != nil {
		t.Fatalf("GetQueue(after restart) = %v", err)
	}
	if jwks2 := httpGet(t, e2.JWKSURL); jwks2 != jwks1 {
		t.Errorf("JWKS after restart = %s, want the same key %s", jwks2, jwks1)
	}
	if q2.RetryConfig.MaxAttempts != q1.RetryConfig.MaxAttempts || q2.RateLimits.MaxDispatchesPerSecond != 200 || q2.RetryConfig.MaxDoublings != 2 {
		t.Errorf("queue after restart = %v, want %v", q2, q1)
	}
	testenv.WaitUntil(t, 20*time.Second, "every task after the restart", func() bool {
		seen := map[string]bool{}
		for _, h := range tg.snapshot() {
			seen[h.header.Get(cloudtasks.HeaderTaskName)] = true
		}
		return len(seen) == n
	})
	hits := tg.snapshot()
	counts := map[string]int{}
	for _, h := range hits {
		counts[h.header.Get(cloudtasks.HeaderTaskName)]++
	}
	dups := 0
	for id, c := range counts {
		// At-least-once: an attempt in flight at the stop was recorded as
		// dispatched but not answered, so it is made again after the restart.
		if c > 1 {
			dups++
			t.Logf("task %s dispatched %d times across the restart", id, c)
		}
	}
	t.Logf("%d dispatches before the stop, %d after, %d tasks repeated", stoppedAt, len(hits)-stoppedAt, dups)
	overdue := 0
	for _, h := range hits {
		eta, _ := strconv.ParseFloat(h.header.Get(cloudtasks.HeaderETA), 64)
		if h.at.After(restartAt) && time.Unix(0, int64(eta*1e9)).Before(restartAt) {
			overdue++
		}
	}
	t.Logf("%d tasks fell due while the emulator was down and were dispatched on start", overdue)
	if stoppedAt < n && overdue == 0 {
		t.Errorf("no task that fell due during the downtime was dispatched after the restart")
	}

	// Tokens from both runs verify against the JWKS of the second: same key.
	v := keyset.NewVerifier(e2.JWKSURL)
	for _, i := range []int{0, len(hits) - 1} {
		h := hits[i]
		raw := h.header.Get("Authorization")[len("Bearer "):]
		if _, err := v.Verify(context.Background(), raw, tg.URL); err != nil {
			t.Errorf("Verify(token of dispatch %d) after restart = %v", i, err)
		}
	}
	// The last 2xx may still be in the middle of being recorded.
	testenv.WaitUntil(t, 20*time.Second, "all tasks recorded as done", func() bool {
		_, err := e2.Client.ListTasks(context.Background(), &cloudtaskspb.ListTasksRequest{Parent: q}).Next()
		return err == iterator.Done
	})
	// Completed names remain reserved across the restart.
	if _, err := e2.Client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: q, Task: tasks[0]}); codeOf(err) != codes.AlreadyExists {
		t.Errorf("CreateTask(name completed before the restart) = %v, want AlreadyExists", err)
	}
	e2.Stop()

	// A third start finds nothing left to do.
	e3 := startEmu(t, cloudtasks.WithDataDir(dir))
	if tk, err := e3.Client.ListTasks(context.Background(), &cloudtaskspb.ListTasksRequest{Parent: q}).Next(); err != iterator.Done {
		t.Errorf("ListTasks(after all ran) = %v, %v; want empty", tk.GetName(), err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// A crash can tear the last line of the state log; that line was never
// acknowledged and is dropped. Damage anywhere else refuses to start rather
// than silently losing tasks.
func TestStateLogDamage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := startEmu(t, cloudtasks.WithDataDir(dir))
	q := e.queue(t, "damaged", nil, nil)
	tk := httpTask("", "http://127.0.0.1:1/")
	tk.ScheduleTime = timestamppb.New(time.Now().Add(time.Hour))
	created := e.task(t, q, tk)
	e.Stop()

	path := filepath.Join(dir, "state.jsonl")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(slices.Clone(good), []byte(`{"op":"task","task":{"na`)...), 0o644); err != nil {
		t.Fatal(err)
	}
	e2 := startEmu(t, cloudtasks.WithDataDir(dir))
	if _, err := e2.Client.GetTask(context.Background(), &cloudtaskspb.GetTaskRequest{Name: created.Name}); err != nil {
		t.Errorf("GetTask(after torn tail) = %v, want the task", err)
	}
	e2.Stop()

	if err := os.WriteFile(path, append([]byte("garbage\n"), good...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cloudtasks.New(cloudtasks.WithDataDir(dir)); err == nil {
		t.Errorf("New(corrupt log) = nil error, want one")
	}
}

// Two emulators on one data directory would interleave their logs.
func TestDataDirIsLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := cloudtasks.New(cloudtasks.WithDataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cloudtasks.New(cloudtasks.WithDataDir(dir)); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("New(dir in use) = %v, want an in-use error", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := cloudtasks.New(cloudtasks.WithDataDir(dir))
	if err != nil {
		t.Fatalf("New(after Close) = %v", err)
	}
	second.Close()
}
