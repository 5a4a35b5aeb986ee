package deliver_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jsdlq/jsdlq/functions/deliver"
	"github.com/jsdlq/jsdlq/internal/secrettest"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/hooksecret"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/secretbox"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const hooksSA = "jsdlq-webhooks@p.iam.gserviceaccount.com"

// minBackoff is the test queue's first retry delay; it doubles per retry.
const minBackoff = 100 * time.Millisecond

// request is one delivery a receiver got.
type request struct {
	header http.Header
	body   []byte
	at     time.Time
}

// receiver is a tenant's HTTPS endpoint: it answers each request with the
// next of its statuses (the last one repeats) and keeps what it got.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []request
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		code := r.statuses[min(len(r.got), len(r.statuses)-1)]
		r.got = append(r.got, request{header: req.Header.Clone(), body: body, at: time.Now()})
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.got...)
}

// env is the webhook path on real components: the Firestore emulator, the
// Pub/Sub emulator's notifications topic, the Cloud Tasks emulator
// dispatching with OIDC tokens to the deliver function behind its
// authentication, and HTTPS receivers.
type env struct {
	ctx     context.Context
	store   *store.Store
	queue   string
	ct      *testenv.CloudTasks
	flusher *notify.Flusher
	url     string // the deliver function
	ps      *pubsub.Client
	sub     string
	roots   *x509.CertPool
	handler func(webhook.GuardOption) *deliver.Handler
	fs      *firestore.Client
	box     *secretbox.Box
	secrets map[string]webhook.Secret // by endpoint id, as shown when added

	mu         sync.Mutex
	dispatches []dispatch
}

// dispatch is one call Cloud Tasks made to the deliver function.
type dispatch struct {
	retry  string  // X-CloudTasks-TaskRetryCount
	eta    float64 // X-CloudTasks-TaskETA: when the attempt was scheduled
	status int     // what deliver answered
}

func (e *env) calls() []dispatch {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]dispatch(nil), e.dispatches...)
}

func setup(t *testing.T, disableAfter int) *env {
	t.Helper()
	e := &env{ctx: testenv.Context(t), roots: x509.NewCertPool(), secrets: map[string]webhook.Secret{}}
	fs, project := testenv.Firestore(t)
	e.fs, e.store = fs, store.New(fs)
	e.box, _ = secrettest.Box(t)

	e.ct = testenv.NewCloudTasks(t)
	parent := fmt.Sprintf("projects/%s/locations/us-central1", project)
	q, err := e.ct.Client.CreateQueue(e.ctx, &cloudtaskspb.CreateQueueRequest{Parent: parent, Queue: &cloudtaskspb.Queue{
		Name: parent + "/queues/dlq-webhooks",
		RetryConfig: &cloudtaskspb.RetryConfig{MaxAttempts: 20, MinBackoff: durationpb.New(minBackoff),
			MaxBackoff: durationpb.New(2 * time.Second), MaxDoublings: 5},
	}})
	if err != nil {
		t.Fatal(err)
	}
	e.queue = q.GetName()

	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		eta, _ := strconv.ParseFloat(r.Header.Get("X-CloudTasks-TaskETA"), 64)
		e.mu.Lock()
		e.dispatches = append(e.dispatches, dispatch{retry: r.Header.Get("X-CloudTasks-TaskRetryCount"), eta: eta, status: rec.Code})
		e.mu.Unlock()
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/Deliver"
	a, err := auth.New(config.Auth{Mode: config.AuthEmulator, Audience: e.url, AllowedEmails: []string{hooksSA}}, e.ct.Host)
	if err != nil {
		t.Fatal(err)
	}
	// The deliverer trusts the receivers' test certificates through the
	// guard's TLS option; local mode lets it reach 127.0.0.1.
	e.handler = func(extra webhook.GuardOption) *deliver.Handler {
		opts := []webhook.GuardOption{webhook.WithTLSConfig(&tls.Config{RootCAs: e.roots}), webhook.WithOwnURLs(e.url)}
		if extra != nil {
			opts = append(opts, extra)
		}
		return deliver.New(deliver.Config{DisableAfter: disableAfter, Timeout: 5 * time.Second},
			deliver.Deps{Store: e.store, Guard: webhook.NewGuard(opts...), Secrets: e.box})
	}
	h = a.Middleware(e.handler(webhook.WithLocal(true)))

	ps, _ := testenv.PubSub(t)
	e.ps = ps
	topic := fmt.Sprintf("projects/%s/topics/%s", project, event.DefaultNotificationsTopic)
	e.sub = fmt.Sprintf("projects/%s/subscriptions/%s", project, testenv.Name(t, "ops"))
	if _, err := ps.TopicAdminClient.CreateTopic(e.ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.SubscriptionAdminClient.CreateSubscription(e.ctx, &pubsubpb.Subscription{Name: e.sub, Topic: topic}); err != nil {
		t.Fatal(err)
	}
	pub := ps.Publisher(topic)
	t.Cleanup(pub.Stop)
	hooks := notify.NewWebhookQueue(config.Webhooks{Queue: e.queue, DeliverURL: e.url, ServiceAccount: hooksSA, EmulatorHost: e.ct.Host})
	t.Cleanup(func() { hooks.Close() })
	e.flusher = notify.New(e.store, notify.PubSubTopic(pub), notify.WithWebhooks(hooks))
	return e
}

// endpoint registers r as a webhook of tenant.
func (e *env) endpoint(t *testing.T, tenant string, r *receiver) *store.Webhook {
	t.Helper()
	e.roots.AddCert(r.srv.Certificate())
	w, sec, err := hooksecret.Create(e.ctx, e.store, e.box, tenant, r.srv.URL+"/hooks/jsdlq", "test")
	if err != nil {
		t.Fatal(err)
	}
	e.secrets[w.ID] = sec
	return w
}

// quarantine records a quarantined entry of tenant: one notification in
// the outbox, pending fan-out (and no triage task, which needs JetStream).
func (e *env) quarantine(t *testing.T, tenant string, seq int64) string {
	t.Helper()
	id := event.ID("TASKS", uint64(seq))
	en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: seq, Subject: "agents.cto.tasks.code_review",
		Tenant: tenant, Agent: "cto", TaskType: "code_review", Kind: "terminated", Payload: []byte(`{"x":1}`),
		Category: "permanent", ReasonCode: "impossible_task", Action: "quarantine", Status: store.Quarantined}
	if _, err := e.store.Record(e.ctx, en, "test"); err != nil {
		t.Fatal(err)
	}
	pending, err := e.store.PendingWebhookFanOut(e.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range pending {
		if n, _ := o.Event(); n.EntryID == id {
			return o.ID
		}
	}
	t.Fatalf("no notification pending fan-out for %s", id)
	return ""
}

// independentlyVerify checks a request by the Standard Webhooks
// specification, without the webhook package: the signature is
// base64(HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")) with
// the key the base64 after "whsec_".
func independentlyVerify(t *testing.T, secret string, r request) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%s.%s", r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"), r.body)
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	if got := r.header.Get("webhook-signature"); got != want {
		t.Errorf("webhook-signature = %q, want %q (independently computed)", got, want)
	}
	ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if err != nil || time.Unix(ts, 0).After(r.at.Add(time.Second)) || r.at.Sub(time.Unix(ts, 0)) > time.Minute {
		t.Errorf("webhook-timestamp %q is not the time of the attempt (%s)", r.header.Get("webhook-timestamp"), r.at)
	}
}

// A tenant's endpoint that fails three times gets the notification once
// more on each of Cloud Tasks' retries (with the queue's growing backoff)
// and once delivered the task ends: every attempt carries the same
// webhook-id and a signature valid for its own timestamp. Another tenant's
// endpoint gets nothing; flushing again creates no second delivery.
func TestDeliverSignedRetriedOnce(t *testing.T) {
	e := setup(t, 10)
	acmeHook := newReceiver(t, 500, 502, 503, 204)
	globexHook := newReceiver(t, 200)
	acme := e.endpoint(t, "acme", acmeHook)
	e.endpoint(t, "globex", globexHook)
	nid := e.quarantine(t, "acme", 1)

	for i, want := range []int{1, 0} {
		res, err := e.flusher.Flush(e.ctx)
		if err != nil || res.Webhooks != want || len(res.WebhookErrors) != 0 {
			t.Fatalf("Flush #%d = %+v, %v, want %d deliveries created", i+1, res, err, want)
		}
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if w, _ := e.store.WebhookByID(e.ctx, acme.ID); w == nil || w.Deliveries != 1 {
			return errors.New("not delivered yet")
		}
		return nil
	})
	e.ct.WaitDrained(t, e.queue)

	got := acmeHook.requests()
	if len(got) != 4 {
		t.Fatalf("acme's endpoint got %d requests, want 4 (3 failures, 1 success)", len(got))
	}
	o, err := e.store.GetNotification(e.ctx, nid)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		independentlyVerify(t, e.secrets[acme.ID].Reveal(), r)
		if id := r.header.Get("webhook-id"); id != nid {
			t.Errorf("attempt %d webhook-id = %q, want the notification id %q", i, id, nid)
		}
		if string(r.body) != o.Notification {
			t.Errorf("attempt %d body = %s, want the notification %s", i, r.body, o.Notification)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("attempt %d Content-Type = %q", i, ct)
		}
	}
	// Cloud Tasks made the retries, on deliver's answers: 503 while the
	// endpoint failed, 200 once delivered; each retry scheduled at least
	// the queue's (doubling) backoff after the attempt before it.
	calls := e.calls()
	if len(calls) != 4 {
		t.Fatalf("Cloud Tasks called deliver %d times, want 4: %+v", len(calls), calls)
	}
	for i, c := range calls {
		wantStatus := http.StatusServiceUnavailable
		if i == 3 {
			wantStatus = http.StatusOK
		}
		if c.retry != strconv.Itoa(i) || c.status != wantStatus {
			t.Errorf("dispatch %d = retry %s, answered %d; want retry %d, %d", i, c.retry, c.status, i, wantStatus)
		}
		if i > 0 {
			gap := time.Duration((c.eta - calls[i-1].eta) * float64(time.Second))
			if want := minBackoff << (i - 1); gap < want-time.Millisecond {
				t.Errorf("retry %d scheduled %s after the attempt before it, want at least the backoff %s", i, gap, want)
			}
		}
	}
	n, err := event.DecodeNotification(got[3].body)
	if err != nil || n.Tenant != "acme" || n.Kind != event.NotifyQuarantined {
		t.Errorf("delivered body = %+v, %v, want acme's quarantine", n, err)
	}
	if g := globexHook.requests(); len(g) != 0 {
		t.Errorf("globex's endpoint got %d requests, want none: the notification is acme's", len(g))
	}
	w, err := e.store.WebhookByID(e.ctx, acme.ID)
	if err != nil || !w.Enabled || w.Failures != 0 || w.LastStatus != 204 || w.Deliveries != 1 {
		t.Errorf("endpoint after delivery = %+v, %v, want enabled, run of failures ended, status 204, 1 delivery", w, err)
	}

	// The receiver's check (the package's Verify) refuses what was not
	// sent: a tampered body, and the genuine request replayed later.
	last := got[3]
	if _, err := webhook.Verify(e.secrets[acme.ID], last.header, last.body, last.at, 0); err != nil {
		t.Errorf("Verify(delivered request) = %v, want accepted", err)
	}
	tampered := []byte(strings.Replace(string(last.body), `"acme"`, `"globex"`, 1))
	if _, err := webhook.Verify(e.secrets[acme.ID], last.header, tampered, last.at, 0); !errors.Is(err, webhook.ErrBadSignature) {
		t.Errorf("Verify(tampered body) = %v, want ErrBadSignature", err)
	}
	if _, err := webhook.Verify(e.secrets[acme.ID], last.header, last.body, last.at.Add(10*time.Minute), 0); !errors.Is(err, webhook.ErrBadTimestamp) {
		t.Errorf("Verify(replayed 10 minutes later) = %v, want ErrBadTimestamp", err)
	}
}

// An endpoint that keeps failing is disabled by the attempt that makes its
// run of failures the configured length: that task ends (200), the
// operators get one webhook_disabled notification on the topic, and no
// later notification is fanned out to it until it is enabled again.
func TestDeliverDisablesAfterFailures(t *testing.T) {
	e := setup(t, 3)
	hook := newReceiver(t, 500)
	w := e.endpoint(t, "acme", hook)
	e.quarantine(t, "acme", 1)
	if res, err := e.flusher.Flush(e.ctx); err != nil || res.Webhooks != 1 {
		t.Fatalf("Flush = %+v, %v, want 1 delivery", res, err)
	}
	e.ct.WaitDrained(t, e.queue)
	if got := len(hook.requests()); got != 3 {
		t.Errorf("the endpoint got %d requests, want 3 (disabled after the third failure)", got)
	}
	var answers []int
	for _, c := range e.calls() {
		answers = append(answers, c.status)
	}
	if want := []int{503, 503, 200}; fmt.Sprint(answers) != fmt.Sprint(want) {
		t.Errorf("deliver answered %v, want %v (retry while enabled, drop once disabled)", answers, want)
	}
	got, err := e.store.WebhookByID(e.ctx, w.ID)
	if err != nil || got.Enabled || got.Failures != 3 || got.DisabledAt.IsZero() || !strings.Contains(got.DisabledReason, "HTTP 500") {
		t.Fatalf("endpoint = %+v, %v, want disabled after 3 failures (HTTP 500)", got, err)
	}

	// The operators are told: the outbox's webhook_disabled goes to the
	// topic on the next flush, and no tenant webhook gets it.
	e.quarantine(t, "acme", 2)
	res, err := e.flusher.Flush(e.ctx)
	if err != nil || res.Published != 2 || res.Webhooks != 0 {
		t.Fatalf("Flush = %+v, %v, want 2 published (the second quarantine, the disabled webhook) and no delivery to the disabled endpoint", res, err)
	}
	var disabled []*pubsub.Message
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	quiet := time.AfterFunc(5*time.Second, cancel)
	var mu sync.Mutex
	_ = e.ps.Subscriber(e.sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		quiet.Reset(3 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		if m.Attributes["kind"] == string(event.NotifyWebhookDisabled) {
			disabled = append(disabled, m)
		}
	})
	if len(disabled) != 1 {
		t.Fatalf("the topic carried %d webhook_disabled notifications, want 1", len(disabled))
	}
	n, err := event.DecodeNotification(disabled[0].Data)
	if err != nil || n.WebhookID != w.ID || n.Tenant != "acme" || disabled[0].Attributes["severity"] != event.SeverityWarning ||
		strings.Contains(string(disabled[0].Data), "/hooks/jsdlq") {
		t.Errorf("webhook_disabled = %+v (%v), want acme's endpoint %s, warning, without its URL path", n, err, w.ID)
	}

	// Enabled again, it receives what comes next.
	if _, err := e.store.EnableWebhook(e.ctx, "acme", w.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	hook.mu.Lock()
	hook.statuses = []int{200}
	hook.got = nil
	hook.mu.Unlock()
	e.quarantine(t, "acme", 3)
	if res, err := e.flusher.Flush(e.ctx); err != nil || res.Webhooks != 1 {
		t.Fatalf("Flush after enable = %+v, %v, want 1 delivery", res, err)
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if len(hook.requests()) != 1 {
			return errors.New("not delivered yet")
		}
		return nil
	})
}

// What cannot or must not be delivered is answered 200 and dropped without
// a request to any endpoint and without changing one: malformed tasks, a
// removed or disabled endpoint, a notification that is gone, an endpoint
// paired with another tenant's notification. A caller without Cloud
// Tasks' token is refused before anything is read.
func TestDeliverDropsWhatCannotBeDelivered(t *testing.T) {
	e := setup(t, 3)
	hook := newReceiver(t, 200)
	acme := e.endpoint(t, "acme", hook)
	disabled := e.endpoint(t, "acme", newReceiver(t, 200))
	for range 3 {
		if _, err := e.store.RecordWebhookAttempt(e.ctx, disabled.ID, store.WebhookAttempt{Status: 500, Error: "HTTP 500"}, 3); err != nil {
			t.Fatal(err)
		}
	}
	removed := e.endpoint(t, "acme", newReceiver(t, 200))
	if err := e.store.DeleteWebhook(e.ctx, "acme", removed.ID); err != nil {
		t.Fatal(err)
	}
	acmeN := e.quarantine(t, "acme", 1)
	globexN := e.quarantine(t, "globex", 2)
	h := e.handler(webhook.WithLocal(true))

	task := func(w, n string) string { return fmt.Sprintf(`{"webhook_id":%q,"notification_id":%q}`, w, n) }
	for _, tt := range []struct {
		name, body, taskName string
	}{
		{"not JSON", "{", ""},
		{"unknown field", `{"webhook_id":"` + acme.ID + `","notification_id":"` + acmeN + `","url":"https://evil.example"}`, ""},
		{"trailing data", task(acme.ID, acmeN) + "{}", ""},
		{"notification id a path", task(acme.ID, "../webhooks/"+acme.ID), ""},
		{"oversized", `{"webhook_id":"` + strings.Repeat("a", 5000) + `"}`, ""},
		{"task name of another task", task(acme.ID, acmeN), "wh-" + acme.ID + "-" + globexN},
		{"unknown endpoint", task("0123456789abcdef", acmeN), ""},
		{"removed endpoint", task(removed.ID, acmeN), ""},
		{"disabled endpoint", task(disabled.ID, acmeN), ""},
		{"notification gone", task(acme.ID, "n-"+strings.Repeat("0", 32)), ""},
		{"another tenant's notification", task(acme.ID, globexN), ""},
	} {
		r := httptest.NewRequestWithContext(e.ctx, http.MethodPost, "/Deliver", strings.NewReader(tt.body))
		if tt.taskName != "" {
			r.Header.Set(tasks.HeaderTaskName, tt.taskName)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var res deliver.Result
		_ = json.Unmarshal(w.Body.Bytes(), &res)
		if w.Code != http.StatusOK || res.Outcome != deliver.OutcomeDropped {
			t.Errorf("%s: deliver = %d %+v, want 200 dropped", tt.name, w.Code, res)
		}
	}
	if got := len(hook.requests()); got != 0 {
		t.Errorf("the endpoint got %d requests, want none", got)
	}
	if w, err := e.store.WebhookByID(e.ctx, acme.ID); err != nil || w.Failures != 0 || !w.LastAttemptAt.IsZero() {
		t.Errorf("endpoint after the refusals = %+v, %v, want untouched", w, err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/Deliver", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET = %d, want 405", w.Code)
	}
	resp, err := http.Post(e.url, "application/json", strings.NewReader(task(acme.ID, acmeN)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(hook.requests()) != 0 {
		t.Errorf("POST without a token = %d (%d requests arrived), want 401 and none", resp.StatusCode, len(hook.requests()))
	}
}

// Outside local mode the deliverer never connects to a loopback address,
// whatever the store holds (an endpoint registered before a policy change,
// or a name that resolves there): the attempt fails, is counted, and Cloud
// Tasks is asked to retry while the endpoint is enabled; one of jsdlq's own
// URLs is refused the same way.
func TestDeliverRefusesWhatTheGuardRefuses(t *testing.T) {
	e := setup(t, 3)
	hook := newReceiver(t, 200)
	w := e.endpoint(t, "acme", hook)
	own, _, err := hooksecret.Create(e.ctx, e.store, e.box, "acme", e.url, "test")
	if err != nil {
		t.Fatal(err)
	}
	nid := e.quarantine(t, "acme", 1)
	strict := e.handler(nil)
	for _, ep := range []*store.Webhook{w, own} {
		res, err := strict.Deliver(e.ctx, notify.WebhookTask{WebhookID: ep.ID, NotificationID: nid})
		if err == nil || res.Outcome != deliver.OutcomeFailed {
			t.Errorf("strict Deliver(%s) = %+v, %v, want failed, to be retried", ep.URL, res, err)
		}
		got, gerr := e.store.WebhookByID(e.ctx, ep.ID)
		if gerr != nil || got.Failures != 1 || !strings.Contains(got.LastError, "refused") {
			t.Errorf("endpoint %s after the refusal = %+v, %v, want one failure naming the refusal", ep.URL, got, gerr)
		}
	}
	if n := len(hook.requests()); n != 0 || len(e.calls()) != 0 {
		t.Errorf("%d requests reached the receiver and %d the deliver function, want none", n, len(e.calls()))
	}
}

// An endpoint added before secrets were sealed (its secret in clear in
// its document, as the store wrote it then) is delivered to, signed with
// that secret, and its secret is sealed in place of the clear one; the
// next delivery opens the sealed one and signs alike.
func TestDeliverLegacySecretIsSealed(t *testing.T) {
	e := setup(t, 3)
	hook := newReceiver(t, 200)
	e.roots.AddCert(hook.srv.Certificate())
	clear, _ := webhook.NewSecret()
	id := "00112233445566aa"
	if _, err := e.fs.Collection(store.Webhooks).Doc(id).Set(e.ctx, map[string]any{"tenant": "acme", "url": hook.srv.URL + "/hooks/old",
		"secret": clear.Reveal(), "enabled": true, "consecutive_failures": 0, "deliveries": 0, "created_at": time.Now(), "created_by": "ops"}); err != nil {
		t.Fatal(err)
	}
	h := e.handler(webhook.WithLocal(true))
	for seq := range int64(2) {
		nid := e.quarantine(t, "acme", seq+1)
		if res, err := h.Deliver(e.ctx, notify.WebhookTask{WebhookID: id, NotificationID: nid}); err != nil || res.Outcome != deliver.OutcomeDelivered {
			t.Fatalf("Deliver #%d to the old endpoint = %+v, %v, want delivered", seq+1, res, err)
		}
		got := hook.requests()
		independentlyVerify(t, clear.Reveal(), got[len(got)-1])
		w, err := e.store.WebhookByID(e.ctx, id)
		if err != nil || w.Secret != "" || len(w.SealedSecret) == 0 || strings.Contains(string(w.SealedSecret), clear.Reveal()[6:]) {
			t.Fatalf("after delivery #%d the endpoint = %+v, %v, want its secret sealed and the clear one gone", seq+1, w, err)
		}
		if sec, legacy, err := hooksecret.Open(e.ctx, e.box, w); err != nil || legacy || sec != clear {
			t.Errorf("Open(sealed) = legacy %v, %v, want the same secret sealed", legacy, err)
		}
	}
	snap, err := e.fs.Collection(store.Webhooks).Doc(id).Get(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Data()["secret"]; ok {
		t.Errorf("the document still holds the clear secret: %v", snap.Data())
	}
}

// A sealed secret copied into another endpoint's record (another tenant's)
// does not open there: nothing is sent, the attempt fails and is counted
// (disabling the endpoint in the end tells the operators), and the
// endpoint it came from still delivers.
func TestDeliverRefusesAMovedSecret(t *testing.T) {
	e := setup(t, 3)
	acmeHook, globexHook := newReceiver(t, 200), newReceiver(t, 200)
	acme := e.endpoint(t, "acme", acmeHook)
	globex := e.endpoint(t, "globex", globexHook)
	if _, err := e.fs.Collection(store.Webhooks).Doc(globex.ID).Update(e.ctx, []firestore.Update{{Path: "secret_sealed", Value: acme.SealedSecret}}); err != nil {
		t.Fatal(err)
	}
	h := e.handler(webhook.WithLocal(true))
	nid := e.quarantine(t, "globex", 1)
	res, err := h.Deliver(e.ctx, notify.WebhookTask{WebhookID: globex.ID, NotificationID: nid})
	if err == nil || res.Outcome != deliver.OutcomeFailed || len(globexHook.requests()) != 0 {
		t.Errorf("Deliver with a moved secret = %+v, %v (%d requests), want failed and nothing sent", res, err, len(globexHook.requests()))
	}
	if w, _ := e.store.WebhookByID(e.ctx, globex.ID); w == nil || w.Failures != 1 || !strings.Contains(w.LastError, "does not open") {
		t.Errorf("endpoint after the refusal = %+v, want one failure naming the secret", w)
	}
	anid := e.quarantine(t, "acme", 2)
	if res, err := h.Deliver(e.ctx, notify.WebhookTask{WebhookID: acme.ID, NotificationID: anid}); err != nil || res.Outcome != deliver.OutcomeDelivered {
		t.Errorf("Deliver to the endpoint the secret is from = %+v, %v, want delivered", res, err)
	}
	independentlyVerify(t, e.secrets[acme.ID].Reveal(), acmeHook.requests()[0])
}

// An operator's breaker override reaches the tenant's endpoint naming the
// operator by role, as the tenant API shows history: the operators'
// notification (the topic, the outbox) says who, the tenant's webhook
// says which role. What the endpoint gets is signed as delivered.
func TestDeliverNamesOperatorsByRole(t *testing.T) {
	e := setup(t, 10)
	acmeHook := newReceiver(t, 204)
	acme := e.endpoint(t, "acme", acmeHook)
	// One failure opens acme's breaker (a store with a threshold of one,
	// new each time: a store remembers a breaker it saw open); an operator
	// closes it, then sends a probe once it is open again.
	alice := authority.Actor{Name: "alice@example.com", Role: authority.Operator}
	for i, override := range []func(id string) error{
		func(string) error { _, err := e.store.BreakerClose(e.ctx, "acme", alice, "fixed upstream"); return err },
		func(id string) error {
			_, err := e.store.BreakerProbeNow(e.ctx, "acme", id, alice, "checked the downstream")
			return err
		},
	} {
		id := event.ID("TASKS", uint64(i+1))
		en := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(i + 1), Subject: "agents.cto.tasks.code_review",
			Tenant: "acme", Agent: "cto", TaskType: "code_review", Kind: "terminated", Payload: []byte(`{}`),
			Category: "transient", ReasonCode: "timeout", Action: "auto_replay", Status: store.Held}
		trip := store.New(e.fs, store.WithBreaker(store.BreakerConfig{Threshold: 1, Window: time.Hour, Cooldown: time.Hour}))
		if _, err := trip.Record(e.ctx, en, "test"); err != nil {
			t.Fatal(err)
		}
		if err := override(id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.flusher.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if w, _ := e.store.WebhookByID(e.ctx, acme.ID); w == nil || w.Deliveries < 4 {
			return errors.New("not delivered yet")
		}
		return nil
	})
	notes := map[event.NotificationKind]string{}
	for _, r := range acmeHook.requests() {
		if strings.Contains(string(r.body), "alice") {
			t.Errorf("acme's endpoint got the operator's name:\n%s", r.body)
		}
		if _, err := webhook.Verify(e.secrets[acme.ID], r.header, r.body, r.at, 0); err != nil {
			t.Errorf("Verify(delivered request) = %v", err)
		}
		n, err := event.DecodeNotification(r.body)
		if err != nil {
			t.Fatalf("delivered body %s: %v", r.body, err)
		}
		if n.BreakerNote != "" {
			notes[n.Kind] = n.BreakerNote
		}
		o, err := e.store.GetNotification(e.ctx, n.ID)
		if err != nil {
			t.Fatal(err)
		}
		ops, err := o.Event()
		if err != nil {
			t.Fatal(err)
		}
		if n.Kind != event.NotifyBreakerOpened && !strings.Contains(ops.BreakerNote, "alice@example.com (operator)") {
			t.Errorf("the operators' %s notification = %q, want it to name the operator", ops.Kind, ops.BreakerNote)
		}
	}
	want := map[event.NotificationKind]string{
		event.NotifyBreakerClosed:   "closed by operator: fixed upstream",
		event.NotifyBreakerHalfOpen: "probe TASKS.2 sent by operator: checked the downstream",
		event.NotifyBreakerOpened:   "1 failures in 1h0m0s",
	}
	if d := cmp.Diff(want, notes); d != "" {
		t.Errorf("breaker notes as acme's endpoint got them (-want +got):\n%s", d)
	}
}

// An endpoint's URL may carry the tenant's own token in its path or
// query; what a delivery records of a refusal names the endpoint's host,
// never the URL, like every other failure: the run of failures that
// disables the endpoint is told to the operators (webhook_disabled) in
// words of the last failure.
func TestDeliverRefusalNamesTheHostNotTheURL(t *testing.T) {
	e := setup(t, 1)
	const token = "s3cret-token"
	// An endpoint that is jsdlq's own address by now (its own URLs grew
	// since it was added), with the tenant's token in its query.
	own, _, err := hooksecret.Create(e.ctx, e.store, e.box, "acme", e.url+"?token="+token, "test")
	if err != nil {
		t.Fatal(err)
	}
	nid := e.quarantine(t, "acme", 1)
	res, err := e.handler(webhook.WithLocal(true)).Deliver(e.ctx, notify.WebhookTask{WebhookID: own.ID, NotificationID: nid})
	if err != nil || res.Outcome != deliver.OutcomeDisabled {
		t.Fatalf("Deliver = %+v, %v, want the endpoint disabled", res, err)
	}
	got, err := e.store.WebhookByID(e.ctx, own.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.LastError, "refused") || !strings.Contains(got.LastError, "127.0.0.1") || strings.Contains(got.LastError, token) {
		t.Errorf("last error = %q, want the refusal naming the host and not the URL", got.LastError)
	}
	pending, err := e.store.ClaimNotifications(e.ctx, "test", time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	disabled := 0
	for _, o := range pending {
		if o.Kind == string(event.NotifyWebhookDisabled) {
			disabled++
			if strings.Contains(o.Notification, token) {
				t.Errorf("the operators' webhook_disabled notification holds the URL's token:\n%s", o.Notification)
			}
		}
	}
	if disabled != 1 {
		t.Errorf("%d webhook_disabled notifications, want 1", disabled)
	}
}
