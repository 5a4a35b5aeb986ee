package forensics_test

// The documented queries (queries/*.sql and the warehouse's views,
// terraform/modules/forensics/views/*.sql) run here on DuckDB over a Parquet
// export of a known history, and each answer is compared with one computed
// in Go from the entries. DuckDB is linked by this test only (cgo;
// internal/depcheck keeps it out of every binary).

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
	gocmp "github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/forensics"
	"github.com/jsdlq/jsdlq/shared/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// history records a known set of entries and moves them, the clock
// advancing between steps, and returns the store and the window.
func history(t *testing.T) (*store.Store, time.Time, time.Time) {
	t.Helper()
	ctx := testenv.Context(t)
	fs, _ := testenv.Firestore(t)
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	clock := testenv.NewClock(start)
	st := store.New(fs, store.WithClock(clock.Now))
	type step struct {
		to   store.Status
		role authority.Role
		note string
		wait time.Duration
	}
	type spec struct {
		agent, taskType, category, reason, strategy string
		status                                      store.Status
		predicted                                   string
		steps                                       []step
		gap                                         time.Duration
	}
	replayed := []step{{store.Replaying, "", "", 30 * time.Second}, {store.Replayed, "", "", time.Second}}
	recovers := append(slices.Clone(replayed), step{store.Recovered, "", "completed", 2 * time.Minute})
	specs := []spec{
		{"cto", "code_review", "transient", "timeout", "backoff", store.Scheduled, "timeout", recovers, 0},
		{"cto", "code_review", "transient", "timeout", "backoff", store.Scheduled, "", recovers, 3 * time.Hour},
		{"cto", "code_review", "transient", "rate_limited", "backoff", store.Scheduled, "timeout", replayed, 26 * time.Hour},
		{"cto", "deploy", "conditional", "context_overflow", "trim", store.Scheduled, "", recovers, 2 * 24 * time.Hour},
		{"cto", "deploy", "conditional", "context_overflow", "trim", store.AwaitingApproval, "context_overflow",
			append([]step{{store.Scheduled, authority.Approver, store.ApprovalNote + " by ann", 40 * time.Minute}}, recovers...), 9 * 24 * time.Hour},
		{"cfo", "invoice", "permanent", "schema_violation", "none", store.Escalated, "",
			[]step{{store.Discarded, authority.Operator, "bad input", 3 * time.Hour}}, time.Hour},
		{"cfo", "invoice", "permanent", "schema_violation", "none", store.Escalated, "",
			[]step{{store.Discarded, authority.TriageAgent, "bad input", 10 * time.Minute}}, 5 * time.Hour},
		{"cfo", "invoice", "poison", "poison", "none", store.Quarantined, "", nil, time.Hour},
		{"cfo", "report", "transient", "timeout", "backoff", store.Scheduled, "",
			[]step{{store.Replaying, "", "", time.Minute}, {store.Held, "", "breaker open", time.Second}, {store.Scheduled, "", "breaker closed", 20 * time.Minute}}, 30 * time.Minute},
	}
	for i, sp := range specs {
		clock.Add(sp.gap)
		id := fmt.Sprintf("TASKS.%d", i+1)
		e := &store.Entry{ID: id, EventID: id, Stream: "TASKS", StreamSeq: int64(i + 1), Subject: "agents." + sp.agent + ".tasks." + sp.taskType,
			Tenant: "acme", Agent: sp.agent, TaskID: "t" + id, TaskType: sp.taskType, Kind: "terminated",
			Headers: map[string][]string{"X-Task-ID": {"t" + id}}, Payload: []byte(`{}`),
			Category: sp.category, ReasonCode: sp.reason, Action: "auto_replay", Strategy: sp.strategy, PolicyVersion: "v1", Status: sp.status}
		if sp.predicted != "" {
			e.Headers[event.HeaderPredictedReason] = []string{sp.predicted}
			e.Headers[event.HeaderPredictedProbability] = []string{fmt.Sprint(0.5 + float64(i)/100)}
		}
		if _, err := st.Record(ctx, e, "classify"); err != nil {
			t.Fatalf("Record(%s) = %v", id, err)
		}
		from := sp.status
		for _, s := range sp.steps {
			clock.Add(s.wait)
			if _, err := st.Transition(ctx, id, store.Change{From: []store.Status{from}, To: s.to, By: "someone", Role: s.role, Note: s.note}); err != nil {
				t.Fatalf("Transition(%s, %s→%s) = %v", id, from, s.to, err)
			}
			from = s.to
		}
	}
	return st, start, clock.Now().Add(time.Hour)
}

// exported reads back what the export wrote, from the store's entries.
func allRows(t *testing.T, st *store.Store, since, until time.Time) []event.ChangeRow {
	t.Helper()
	var buf bytes.Buffer
	w, _ := forensics.NewWriter(forensics.FormatNDJSON, &buf)
	if _, err := (forensics.Export{Since: since, Until: until, PageSize: 3}).Run(testenv.Context(t), st, w); err != nil {
		t.Fatal(err)
	}
	var out []event.ChangeRow
	for line := range strings.Lines(buf.String()) {
		r, err := event.DecodeChangeRow([]byte(strings.TrimSpace(line)))
		if err != nil {
			t.Fatalf("DecodeChangeRow(%s) = %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// duckPrelude is the documented translation of the queries' BigQuery SQL to
// DuckDB (docs/forensics.md): the table's dataset is a schema, the table a
// view over the Parquet export, BigQuery's UNIX_MICROS a macro, times in UTC
// (BigQuery's CAST(timestamp AS DATE) is UTC's date).
func duckPrelude(parquetFile string) []string {
	return []string{
		"SET TimeZone = 'UTC'",
		"CREATE SCHEMA jsdlq_forensics",
		fmt.Sprintf("CREATE VIEW jsdlq_forensics.changes AS SELECT * FROM read_parquet('%s')", parquetFile),
		"CREATE MACRO unix_micros(t) AS epoch_us(t)",
	}
}

// duckSQL is a query's text as DuckDB runs it: BigQuery's named parameters
// @name are DuckDB's $name. Nothing else changes.
func duckSQL(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if q[i] == '@' {
			b.WriteByte('$')
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func TestQueriesOnDuckDB(t *testing.T) {
	st, since, until := history(t)
	ctx := testenv.Context(t)
	root := testenv.ModuleRoot(t)
	file := filepath.Join(t.TempDir(), "changes.parquet")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := forensics.NewWriter(forensics.FormatParquet, f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := (forensics.Export{Since: since, Until: until, PageSize: 4}).Run(ctx, st, w)
	if err != nil || w.Close() != nil || f.Close() != nil {
		t.Fatalf("export = %+v, %v", res, err)
	}
	rows := allRows(t, st, since, until)
	if res.Rows != int64(len(rows)) || res.Entries != 9 {
		t.Fatalf("export = %+v, want 9 entries and %d rows", res, len(rows))
	}

	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the prelude's settings are the connection's
	for _, s := range duckPrelude(file) {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	// The Parquet file holds the rows as the feed carries them.
	if got := queryAll(t, db, "SELECT change_id FROM jsdlq_forensics.changes ORDER BY change_id"); len(got) != len(rows) {
		t.Errorf("Parquet rows = %d, want %d", len(got), len(rows))
	}

	oracles := map[string]func([]event.ChangeRow, time.Time, time.Time) [][]string{
		"queries/top_reasons_per_agent.sql":                    topReasons,
		"queries/recovery_by_category_strategy.sql":            recoveryByCategory,
		"queries/time_to_decision_and_recovery.sql":            timesTo,
		"queries/repeat_offenders.sql":                         repeatOffenders,
		"queries/predictions_vs_deaths.sql":                    predictionsVsDeaths,
		"terraform/modules/forensics/views/latest_state.sql":   latestState,
		"terraform/modules/forensics/views/daily_outcomes.sql": dailyOutcomes,
	}
	files, _ := filepath.Glob(filepath.Join(root, "queries", "*.sql"))
	views, _ := filepath.Glob(filepath.Join(root, "terraform/modules/forensics/views", "*.sql"))
	for _, path := range append(files, views...) {
		rel, _ := filepath.Rel(root, path)
		oracle, ok := oracles[rel]
		if !ok {
			t.Errorf("%s has no answer computed in Go: every documented query is tested", rel)
			continue
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got := queryAll(t, db, duckSQL(string(text)), sql.Named("since", since), sql.Named("until", until))
		want := oracle(rows, since, until)
		if strings.Contains(rel, "views/") {
			// A view's rows come in no order.
			slices.SortFunc(got, compareRows)
			slices.SortFunc(want, compareRows)
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("%s on DuckDB differs from the entries' answer (-want +got):\n%s", rel, diff)
		}
		if len(want) == 0 {
			t.Errorf("%s: the known history gives it nothing to answer", rel)
		}
	}
}

func compareRows(a, b []string) int { return slices.Compare(a, b) }

// queryAll runs q and returns its rows as text.
func queryAll(t *testing.T, db *sql.DB, q string, args ...any) [][]string {
	t.Helper()
	rs, err := db.QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer rs.Close()
	cols, _ := rs.Columns()
	var out [][]string
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = text(v)
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// text writes a value the same way whichever side computed it.
func text(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case float64:
		return fmt.Sprintf("%.4f", v)
	case float32:
		return fmt.Sprintf("%.4f", v)
	case time.Time:
		if v.Hour() == 0 && v.Minute() == 0 && v.Second() == 0 && v.Nanosecond() == 0 {
			return v.UTC().Format(time.DateOnly)
		}
		return v.UTC().Format(time.RFC3339Nano)
	case []byte:
		return string(v)
	}
	return fmt.Sprint(v)
}

func in(t, since, until time.Time) bool { return !t.Before(since) && t.Before(until) }

func deaths(rows []event.ChangeRow, since, until time.Time) []event.ChangeRow {
	var out []event.ChangeRow
	for _, r := range rows {
		if r.Transition == event.ChangeCreated && in(r.At, since, until) {
			out = append(out, r)
		}
	}
	return out
}

func ratio(a, b int) string { return text(math.Round(float64(a)/float64(b)*1e4) / 1e4) }

func topReasons(rows []event.ChangeRow, since, until time.Time) [][]string {
	counts := map[string]map[string]int{}
	for _, r := range deaths(rows, since, until) {
		if counts[r.Agent] == nil {
			counts[r.Agent] = map[string]int{}
		}
		counts[r.Agent][r.ReasonCode]++
	}
	var out [][]string
	for _, agent := range slices.Sorted(maps.Keys(counts)) {
		total := 0
		for _, n := range counts[agent] {
			total += n
		}
		reasons := slices.SortedFunc(maps.Keys(counts[agent]), func(a, b string) int {
			return cmp.Or(cmp.Compare(counts[agent][b], counts[agent][a]), cmp.Compare(a, b))
		})
		for i, reason := range reasons[:min(5, len(reasons))] {
			out = append(out, []string{agent, fmt.Sprint(i + 1), reason, fmt.Sprint(counts[agent][reason]), ratio(counts[agent][reason], total)})
		}
	}
	return out
}

// byEntry groups the rows of the entries that died in the window.
func byEntry(rows []event.ChangeRow, since, until time.Time) map[string][]event.ChangeRow {
	out := map[string][]event.ChangeRow{}
	for _, r := range rows {
		if in(r.CreatedAt, since, until) {
			out[r.EntryID] = append(out[r.EntryID], r)
		}
	}
	return out
}

func recoveryByCategory(rows []event.ChangeRow, since, until time.Time) [][]string {
	type key struct{ category, strategy string }
	type tally struct{ entries, recovered, auto int }
	tallies := map[key]*tally{}
	for _, rs := range byEntry(rows, since, until) {
		k := key{rs[0].Category, rs[0].Strategy}
		if tallies[k] == nil {
			tallies[k] = &tally{}
		}
		recovered, touched := false, false
		for _, r := range rs {
			recovered = recovered || r.ToStatus == string(store.Recovered)
			touched = touched || r.ActorRole != ""
		}
		tl := tallies[k]
		tl.entries++
		if recovered {
			tl.recovered++
			if !touched {
				tl.auto++
			}
		}
	}
	var out [][]string
	for _, k := range slices.SortedFunc(maps.Keys(tallies), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.category, b.category), cmp.Compare(a.strategy, b.strategy))
	}) {
		tl := tallies[k]
		out = append(out, []string{k.category, k.strategy, fmt.Sprint(tl.entries), fmt.Sprint(tl.recovered), fmt.Sprint(tl.auto), ratio(tl.recovered, tl.entries)})
	}
	return out
}

// nearestRank is the p-th percentile of sorted values by nearest rank.
func nearestRank(sorted []int64, p float64) int64 {
	return sorted[max(int(math.Ceil(p*float64(len(sorted))))-1, 0)]
}

// timesTo is the time to a decision's rows, then the time to recovery's,
// each with its measure first.
func timesTo(rows []event.ChangeRow, since, until time.Time) [][]string {
	var out [][]string
	for _, m := range []struct {
		name  string
		match func(event.ChangeRow) bool
	}{
		{"decision", func(r event.ChangeRow) bool { return r.ActorRole != "" }},
		{"recovery", func(r event.ChangeRow) bool { return r.ToStatus == string(store.Recovered) }},
	} {
		for _, row := range timeTo(m.match)(rows, since, until) {
			out = append(out, append([]string{m.name}, row...))
		}
	}
	return out
}

func timeTo(match func(event.ChangeRow) bool) func([]event.ChangeRow, time.Time, time.Time) [][]string {
	return func(rows []event.ChangeRow, since, until time.Time) [][]string {
		ages := map[string][]int64{}
		for _, rs := range byEntry(rows, since, until) {
			first := int64(-1)
			for _, r := range rs {
				if match(r) && (first < 0 || r.AgeMs < first) {
					first = r.AgeMs
				}
			}
			if first >= 0 {
				ages[rs[0].Category] = append(ages[rs[0].Category], first)
			}
		}
		var out [][]string
		for _, c := range slices.Sorted(maps.Keys(ages)) {
			a := ages[c]
			slices.Sort(a)
			out = append(out, []string{c, fmt.Sprint(len(a)), fmt.Sprint(nearestRank(a, 0.5)), fmt.Sprint(nearestRank(a, 0.95))})
		}
		return out
	}
}

func repeatOffenders(rows []event.ChangeRow, since, until time.Time) [][]string {
	type key struct{ tenant, agent, taskType string }
	ds := deaths(rows, since, until)
	total, repeats := map[key]int{}, map[key]int{}
	for _, d := range ds {
		k := key{d.Tenant, d.Agent, d.TaskType}
		total[k]++
		for _, p := range ds {
			if p.ChangeID != d.ChangeID && (key{p.Tenant, p.Agent, p.TaskType}) == k && !p.At.After(d.At) && d.At.Sub(p.At) < 7*24*time.Hour {
				repeats[k]++
				break
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(repeats), func(a, b key) int {
		return cmp.Or(cmp.Compare(repeats[b], repeats[a]), cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.agent, b.agent), cmp.Compare(a.taskType, b.taskType))
	})
	var out [][]string
	for _, k := range keys {
		out = append(out, []string{k.tenant, k.agent, k.taskType, fmt.Sprint(total[k]), fmt.Sprint(repeats[k])})
	}
	return out
}

func predictionsVsDeaths(rows []event.ChangeRow, since, until time.Time) [][]string {
	type key struct{ agent, taskType string }
	type tally struct {
		deaths, predicted, right int
		prob                     float64
	}
	tallies := map[key]*tally{}
	for _, d := range deaths(rows, since, until) {
		if d.ReplayOf != "" {
			continue
		}
		k := key{d.Agent, d.TaskType}
		if tallies[k] == nil {
			tallies[k] = &tally{}
		}
		tl := tallies[k]
		tl.deaths++
		if d.PredictedReason != "" {
			tl.predicted++
			tl.prob += d.PredictedProbability
			if d.PredictedReason == d.ReasonCode {
				tl.right++
			}
		}
	}
	var out [][]string
	for _, k := range slices.SortedFunc(maps.Keys(tallies), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.agent, b.agent), cmp.Compare(a.taskType, b.taskType))
	}) {
		tl := tallies[k]
		mean := "NULL"
		if tl.predicted > 0 {
			mean = text(math.Round(tl.prob/float64(tl.predicted)*1e4) / 1e4)
		}
		out = append(out, []string{k.agent, k.taskType, fmt.Sprint(tl.deaths), fmt.Sprint(tl.predicted), fmt.Sprint(tl.right), mean})
	}
	return out
}

func latestState(rows []event.ChangeRow, _, _ time.Time) [][]string {
	last := map[string]event.ChangeRow{}
	for _, r := range rows {
		if l, ok := last[r.EntryID]; !ok || r.At.After(l.At) {
			last[r.EntryID] = r
		}
	}
	var out [][]string
	for _, r := range last {
		state := r.ToStatus
		if !r.ExpireAt.After(time.Now()) {
			state = "expired"
		}
		out = append(out, []string{r.EntryID, r.Tenant, r.Agent, r.TaskType, r.Stream, r.ReasonCode, r.Category, r.Action, r.Strategy,
			r.ToStatus, state, fmt.Sprint(r.Attempt), r.RootID, r.ReplayOf, text(r.CreatedAt), text(r.At), text(r.ExpireAt)})
	}
	return out
}

func dailyOutcomes(rows []event.ChangeRow, _, _ time.Time) [][]string {
	type key struct{ day, category string }
	counts := map[key]map[string]int{}
	for _, r := range rows {
		k := key{r.At.UTC().Format(time.DateOnly), r.Category}
		if counts[k] == nil {
			counts[k] = map[string]int{}
		}
		counts[k][r.Transition]++
	}
	var out [][]string
	for k, c := range counts {
		out = append(out, []string{k.day, k.category, fmt.Sprint(c[event.ChangeCreated]), fmt.Sprint(c[event.ChangeRecovered]),
			fmt.Sprint(c[event.ChangeDiscarded]), fmt.Sprint(c[event.ChangeDecided]), fmt.Sprint(c[event.ChangeQuarantined])})
	}
	return out
}
