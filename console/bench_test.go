package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/console"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// BenchmarkPages measures the server time of the list and entry pages over
// a failure log of JSDLQ_BENCH_ENTRIES entries (default 100 000) in the
// Firestore emulator: the handler alone, in process, so the figures are
// the console's queries and rendering, not a network. Each sub-benchmark
// reports its p50 and p95; nothing is asserted on them (make bench records
// them, docs/PERFORMANCE.md).
func BenchmarkPages(b *testing.B) {
	n := 100_000
	if v := os.Getenv("JSDLQ_BENCH_ENTRIES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("JSDLQ_BENCH_ENTRIES=%q, want a number of at least 100", v)
		}
	}
	e := newEnv(b, console.LocalAuth("bench@example.com"))
	t0 := time.Now()
	ids := seedMany(b, e, n)
	b.Logf("seeded %d entries in %s", n, time.Since(t0).Round(time.Second))
	h := e.srv.Config.Handler

	mid := ids[len(ids)/2]
	for _, bc := range []struct{ name, path string }{
		{"list", "/entries"},
		{"list_filtered", "/entries?tenant=tenant-07&status=escalated"},
		{"list_page_2", ""}, // the next page of the unfiltered list, found below
		{"entry", "/entries/" + mid},
		// The overview: 168 hours of metrics and of stream samples, 8
		// recovery counts, the waiting entries, breakers, the last audit.
		{"overview", "/"},
	} {
		path := bc.path
		if bc.name == "list_page_2" {
			path = nextPage(b, h)
		}
		b.Run(bc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, path, nil)
				w := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(w, req)
				lat = append(lat, time.Since(start))
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s = %d:\n%s", path, w.Code, w.Body)
				}
			}
			reportPercentiles(b, lat)
		})
	}
	// The overview's own reads alone: the week of hourly series, and the
	// recovery counts of the 7-day window.
	for _, rc := range []struct {
		name string
		read func(ctx context.Context) error
	}{
		{"query_overview_hours", func(ctx context.Context) error {
			first := time.Now().Truncate(time.Hour).Add(-167 * time.Hour)
			if _, err := e.st.HourlyMetrics(ctx, first, 168); err != nil {
				return err
			}
			_, err := e.st.HourlyPublished(ctx, first, 168)
			return err
		}},
		{"query_overview_recovery_7d", func(ctx context.Context) error {
			_, err := e.st.RecoveryBetween(ctx, time.Now().Add(-7*24*time.Hour), time.Now())
			return err
		}},
	} {
		b.Run(rc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if err := rc.read(context.Background()); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportPercentiles(b, lat)
		})
	}
	// The store's query alone, for the two list pages: what of a page's
	// time is Firestore (here the emulator) and what is the console.
	for _, qc := range []struct {
		name string
		q    store.Query
	}{
		{"query_list", store.Query{View: store.ListView, Limit: console.DefaultPageSize}},
		{"query_list_filtered", store.Query{Tenant: "tenant-07", Status: store.Escalated, View: store.ListView, Limit: console.DefaultPageSize}},
	} {
		b.Run(qc.name, func(b *testing.B) {
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if _, err := e.st.Entries(ctx, qc.q); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportPercentiles(b, lat)
		})
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)*50/100]), "p50-ms")
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*95/100)]), "p95-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// nextPage is the link to the second page of the unfiltered list.
func nextPage(b *testing.B, h http.Handler) string {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/entries", nil))
	m := nextLink.FindStringSubmatch(w.Body.String())
	if m == nil {
		b.Fatalf("the first page of /entries has no next link")
	}
	return html.UnescapeString(m[1])
}

var nextLink = regexp.MustCompile(`<a class="next" href="([^"]+)">`)

// seedMany writes n entries with a BulkWriter: 20 tenants, a status and a
// category mix, created over the last 7 days. They are written as the store
// shapes them (the Entry type's Firestore fields), not through Record, whose
// one transaction per entry would take minutes in the emulator.
func seedMany(b *testing.B, e *env, n int) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	statuses := []store.Status{store.Scheduled, store.Replayed, store.Recovered, store.Escalated, store.AwaitingApproval, store.Discarded, store.Quarantined}
	categories := []string{"transient", "transient", "transient", "conditionally_recoverable", "permanent"}
	now := time.Now().UTC()
	payload := []byte(`{"prompt":"write the weekly report","max_tokens":8000,"context":["a","b","c"]}`)
	sum := store.PayloadSum(payload)
	bw := e.fs.BulkWriter(ctx)
	ids := make([]string, n)
	jobs := make([]*firestore.BulkWriterJob, n)
	for i := range n {
		id := fmt.Sprintf("TASKS.%d", i+1)
		ids[i] = id
		tenant := fmt.Sprintf("tenant-%02d", i%20)
		created := now.Add(-time.Duration(i) * 7 * 24 * time.Hour / time.Duration(n))
		st := statuses[i%len(statuses)]
		h := map[string][]string{jevent.HeaderTenant: {tenant}, jevent.HeaderTaskID: {"task-" + id}, jevent.HeaderIdempotencyKey: {"key-" + id}}
		en := &store.Entry{ID: id, EventID: id, Stream: jevent.DefaultWorkStream, StreamSeq: int64(i + 1),
			Subject: "agents.writer.tasks.report", Tenant: tenant, Agent: "writer", TaskID: "task-" + id, TaskType: "report", IdempotencyKey: "key-" + id,
			Headers: jevent.EncodeHeaders(h), Payload: payload, PayloadSize: int64(len(payload)), PayloadSHA256: sum, Kind: string(jevent.KindExplicit), Kinds: []string{string(jevent.KindExplicit)},
			Failure: &jevent.Failure{Code: "timeout", Attempt: 3, Agent: "writer"}, Status: st, Strategy: "transient",
			Category: categories[i%len(categories)], ReasonCode: "timeout", Action: "auto_replay", PolicyVersion: "bench", RootID: id,
			CreatedAt: created, UpdatedAt: created, ExpireAt: created.Add(store.Retention),
			History: []store.Transition{{At: created, To: string(st), By: "classify"}}}
		job, err := bw.Set(e.fs.Collection(store.FailureLog).Doc(id), en)
		if err != nil {
			b.Fatalf("seed %s: %v", id, err)
		}
		jobs[i] = job
	}
	bw.End()
	for i, job := range jobs {
		if _, err := job.Results(); err != nil {
			b.Fatalf("seed %s: %v", ids[i], err)
		}
	}
	return ids
}
