package reconcile_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/functions/reconcile"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// FromEnv wires the production clients (Firestore, Cloud Tasks, a lazily
// connected JetStream) from the environment: here all pointed at the
// emulators and an embedded JetStream, with AUTH_MODE=none.
func TestFromEnvRunsAgainstEmulators(t *testing.T) {
	ctx := testenv.Context(t)
	testenv.FirestoreHost(t)
	project := testenv.Project(t)
	ct := testenv.NewCloudTasks(t)
	queue := ct.Queue(t, project, "dlq-replay")
	if _, err := ct.Client.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: queue}); err != nil {
		t.Fatal(err)
	}
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	if err := bridge.Ensure(ctx, js, bridge.Names{AdvisoryStream: event.DefaultAdvisoryStream, RecordStream: event.DefaultRecordStream, FailureBucket: event.DefaultFailureBucket}, obs.Discard()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: event.DefaultWorkStream, Subjects: []string{"agents.>"}}); err != nil {
		t.Fatal(err)
	}
	h := reconcile.FromEnv(context.Background(), config.MapLookup(map[string]string{
		"GOOGLE_CLOUD_PROJECT":      project,
		"CLOUD_TASKS_EMULATOR_HOST": ct.Host,
		"NATS_URL":                  n.URL,
		"AUTH_MODE":                 config.AuthNone,
		"TASKS_QUEUE":               queue,
		"REPLAY_URL":                "http://127.0.0.1:9/Replay",
		"TASKS_SERVICE_ACCOUNT":     "tasks@test.iam.gserviceaccount.com",
		"WORK_STREAMS":              event.DefaultWorkStream,
		"RECONCILE_TIME_BUDGET":     "30s",
		"ADVISORY_STREAM":           event.DefaultAdvisoryStream,
		"RECORD_STREAM":             event.DefaultRecordStream,
	}), io.Discard)
	for _, target := range []string{"/Reconcile?dry_run=1", "/Reconcile"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, target, nil))
		var rep audit.Report
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &rep) != nil {
			t.Fatalf("POST %s = %d %s", target, w.Code, w.Body)
		}
		if !rep.Complete || rep.Traffic == nil || len(rep.Traffic.Streams) != 1 {
			t.Errorf("POST %s: report complete=%v traffic=%+v sections=%+v, want every section run", target, rep.Complete, rep.Traffic, rep.Sections)
		}
	}
}
