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
	"github.com/jsdlq/jsdlq/shared/audit"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// BenchmarkPages measures the server time of the list, entry and overview
// pages over a failure log of JSDLQ_BENCH_ENTRIES entries (default 100 000)
// in the Firestore emulator: the handler alone, in process, so the figures
// are the console's queries and rendering, not a network. Each
// sub-benchmark reports its p50 and p95, and the pages the Firestore
// documents one request reads (store.Ops); the reads are held to their
// bounds (overviewMaxReads, a list page's page size + 1 and one count),
// the times are only recorded (make bench, docs/PERFORMANCE.md).
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
	t0 = time.Now()
	seedAround(b, e)
	b.Logf("counted the week's hours into the metrics and day rollups (reconcile's recount), opened %d breakers, sampled the work stream: %s",
		benchBreakers, time.Since(t0).Round(time.Second))
	h := e.srv.Config.Handler

	mid := ids[len(ids)/2]
	for _, bc := range []struct {
		name, path string
		maxReads   int64 // 0: not bounded here
	}{
		{"list", "/entries", console.DefaultPageSize + 1 + 1},
		{"list_filtered", "/entries?tenant=tenant-07&status=escalated", console.DefaultPageSize + 1 + 1},
		{"list_page_2", "", console.DefaultPageSize + 1 + 1}, // the next page of the unfiltered list, found below
		{"entry", "/entries/" + mid, 0},
		// The overview: 8 day rollups, the oldest waiting entries, the
		// breakers not closed and their count, the last audit.
		{"overview", "/", overviewMaxReads},
	} {
		path := bc.path
		if bc.name == "list_page_2" {
			path = nextPage(b, h)
		}
		b.Run(bc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			before := e.st.Ops()
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
			reads := (e.st.Ops().Reads - before.Reads) / int64(len(lat))
			b.ReportMetric(float64(reads), "reads/op")
			if bc.maxReads > 0 && reads > bc.maxReads {
				b.Errorf("GET %s reads %d documents, want at most %d", path, reads, bc.maxReads)
			}
			reportPercentiles(b, lat)
		})
	}
	// The store's reads alone: the overview's week of day rollups, and for
	// the two list pages the query and the count: what of a page's time is
	// Firestore (here the emulator) and what is the console.
	week := func() time.Time { return time.Now().Truncate(time.Hour).Add(-167 * time.Hour) }
	for _, rc := range []struct {
		name string
		read func(ctx context.Context) error
	}{
		{"query_overview_rollups", func(ctx context.Context) error { _, err := e.st.HourlyRollups(ctx, week(), 168); return err }},
		// The overview's other read of the log: the oldest entries waiting
		// for a human, whatever their age.
		{"query_overview_waiting", func(ctx context.Context) error {
			_, err := e.st.Entries(ctx, store.Query{Statuses: operator.Approvable, Order: store.OldestFirst, View: store.ListView, Limit: console.OverviewWaiting})
			return err
		}},
		{"query_list", func(ctx context.Context) error { _, err := e.st.Entries(ctx, benchList); return err }},
		{"count_list", func(ctx context.Context) error { _, err := e.st.Count(ctx, benchList); return err }},
		{"query_list_filtered", func(ctx context.Context) error { _, err := e.st.Entries(ctx, benchFiltered); return err }},
		{"count_list_filtered", func(ctx context.Context) error { _, err := e.st.Count(ctx, benchFiltered); return err }},
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
}

// The store queries of the two list pages.
var (
	benchList     = store.Query{View: store.ListView, Limit: console.DefaultPageSize}
	benchFiltered = store.Query{Tenant: "tenant-07", Status: store.Escalated, FoldCase: true, View: store.ListView, Limit: console.DefaultPageSize}
)

// benchBreakers is how many tenants' breakers the benchmark opens: more
// than the overview lists, so it counts them too.
const benchBreakers = 12

// seedAround gives seedMany's log what the pipeline keeps around it: the
// week's hourly metrics and day rollups, which reconcile's recount rebuilds
// from the entries (store.RecountHour, the repair of any drift); breakers
// opened by ten failures each (through Record, as classify opens them);
// reconcile's samples of the work stream, one an hour; and an audit.
func seedAround(b *testing.B, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	now := time.Now().UTC()
	for t := range benchBreakers {
		for i := range store.DefaultBreaker.Threshold {
			id := fmt.Sprintf("BREAK.%d", t*100+i+1)
			en := &store.Entry{ID: id, EventID: id, Stream: "BREAK", StreamSeq: int64(t*100 + i + 1), Tenant: fmt.Sprintf("tenant-%02d", t),
				Agent: "writer", Kind: string(jevent.KindExplicit), Status: store.Scheduled, Category: "transient", ReasonCode: "timeout", Action: "auto_replay"}
			if _, err := e.st.Record(ctx, en, "classify"); err != nil {
				b.Fatalf("Record(%s) = %v", id, err)
			}
		}
	}
	// Hour by hour, a day per goroutine: the hours of a day share their
	// rollup document, whose rewrites would only wait on each other.
	first := now.Truncate(time.Hour).Add(-7 * 24 * time.Hour)
	errs := make(chan error, 8)
	for d := range 8 {
		go func() {
			for h := d * 24; h < min((d+1)*24, 7*24+1); h++ {
				if _, err := e.st.RecountHour(ctx, first.Add(time.Duration(h)*time.Hour), 1000, false); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			b.Fatalf("recount: %v", err)
		}
	}
	seq := int64(0)
	for h := first; !h.After(now); h = h.Add(time.Hour) {
		next := seq + 100_000
		if err := e.st.RecordSample(ctx, h, store.MetricsSample{Stream: jevent.DefaultWorkStream, FirstAt: h, LastAt: h, FirstLastSeq: seq, LastSeq: next}); err != nil {
			b.Fatal(err)
		}
		seq = next
	}
	rep := &audit.Report{Schema: audit.Schema, RunID: now.Format("20060102T150405Z") + "-bench", StartedAt: now.Add(-time.Minute), FinishedAt: now, Complete: true, Alerts: []string{}}
	if err := e.st.SaveAudit(ctx, rep); err != nil {
		b.Fatal(err)
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
			Subject: "agents.writer.tasks.report", Tenant: tenant, Agent: "writer", TenantFold: store.FoldName(tenant), AgentFold: store.FoldName("writer"), TaskID: "task-" + id, TaskType: "report", IdempotencyKey: "key-" + id,
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
