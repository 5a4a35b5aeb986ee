package deploycheck

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// index is a composite index Terraform declares.
type index struct {
	Address    string
	Collection string
	Group      bool
	Fields     []orderField
}

// tfIndexes is what Firestore will have: the composite indexes of the
// plan, and the single-field indexes it keeps automatically except where a
// google_firestore_field turns them off (index_config {}).
type tfIndexes struct {
	composite []index
	exempt    map[string]bool // "collection/field"
}

func readIndexes(p *tfPlan) tfIndexes {
	ix := tfIndexes{exempt: map[string]bool{}}
	for _, r := range p.resources("google_firestore_index") {
		x := index{Address: r.Address, Collection: str(r.Values["collection"]), Group: str(r.Values["query_scope"]) == "COLLECTION_GROUP"}
		fields, _ := r.Values["fields"].([]any)
		for _, f := range fields {
			m, _ := f.(map[string]any)
			if str(m["order"]) == "" {
				continue // array_config or vector fields serve no order
			}
			x.Fields = append(x.Fields, orderField{Path: str(m["field_path"]), Desc: str(m["order"]) == "DESCENDING"})
		}
		if n := len(x.Fields); n > 1 && x.Fields[n-1].Path == docID && x.Fields[n-1].Desc == x.Fields[n-2].Desc {
			x.Fields = x.Fields[:n-1]
		}
		ix.composite = append(ix.composite, x)
	}
	for _, r := range p.resources("google_firestore_field") {
		cfg, _ := r.Values["index_config"].([]any)
		if len(cfg) == 0 {
			continue // no index_config: the automatic indexes stay
		}
		c, _ := cfg[0].(map[string]any)
		if idx, _ := c["indexes"].([]any); len(idx) == 0 {
			ix.exempt[str(r.Values["collection"])+"/"+str(r.Values["field"])] = true
		}
	}
	sort.Slice(ix.composite, func(i, j int) bool { return ix.composite[i].Address < ix.composite[j].Address })
	return ix
}

func str(v any) string { s, _ := v.(string); return s }

// serve says which index serves s, under Firestore's rules: equality
// filters alone are served by the single-field indexes (merged); one order
// (or one range, which orders by its field) without equality filters by the
// single-field index of that field; anything else needs composite indexes
// ending with the query's order fields in the same directions, either one
// whose other fields are exactly the equality fields, or several whose
// other fields are equality fields and together cover all of them (index
// merging).
func (ix tfIndexes) serve(s shape) (string, bool) {
	single := func(f string) bool { return !ix.exempt[s.Collection+"/"+f] }
	if !s.Group { // collection-group queries get no automatic indexes
		if len(s.Orders) == 0 && !slices.ContainsFunc(s.Equal, func(f string) bool { return !single(f) }) {
			if len(s.Equal) == 0 {
				return "built-in (no filter, no order)", true
			}
			return "single-field indexes (automatic)", true
		}
		if len(s.Equal) == 0 && len(s.Orders) == 1 && single(s.Orders[0].Path) {
			return "single-field index on " + s.Orders[0].Path + " (automatic)", true
		}
	}
	var merged []string
	covered := map[string]bool{}
	for _, x := range ix.composite {
		n := len(x.Fields) - len(s.Orders)
		if x.Collection != s.Collection || x.Group != s.Group || n < 0 || !slices.Equal(x.Fields[n:], s.Orders) {
			continue
		}
		prefix := x.Fields[:n]
		if slices.ContainsFunc(prefix, func(f orderField) bool { return !slices.Contains(s.Equal, f.Path) }) {
			continue
		}
		if len(prefix) == len(s.Equal) {
			return x.Address, true
		}
		if len(prefix) > 0 {
			merged = append(merged, x.Address)
			for _, f := range prefix {
				covered[f.Path] = true
			}
		}
	}
	if len(s.Equal) > 0 && len(covered) == len(s.Equal) {
		sort.Strings(merged)
		return "merge of " + strings.Join(merged, " + "), true
	}
	return "", false
}

// TestEveryQueryHasAnIndex runs every query the code can issue against the
// Firestore emulator through a client that records each query's shape,
// then checks each shape against the indexes Terraform declares. The
// emulator enforces no index; production answers FAILED_PRECONDITION to a
// query without one.
//
// What runs: store.Query in every combination of its equality filters
// (found by reflection, so a new filter is covered at once), with and
// without the created_at range, in each of its orders, through Entries and
// Count; then every other method of *store.Store, called by reflection with
// made-up arguments (a query is sent whatever the arguments select). A
// source scan then fails for any function that builds a Firestore query
// (Where, OrderBy, ...) but never sent one here: a query path this test did
// not reach, e.g. one outside shared/store. Last, each declared composite
// index is removed in turn: some shape must lose its index, so no index is
// dead weight and removing one from Terraform fails this test.
func TestEveryQueryHasAnIndex(t *testing.T) {
	t.Parallel()
	ix := readIndexes(offlinePlan(t))
	if len(ix.composite) == 0 {
		t.Fatal("the plan declares no google_firestore_index; expected the failure-log indexes")
	}
	rec := newRecorder()
	ctx := testenv.Context(t)
	fs := recordingClient(t, ctx, rec)
	st := store.New(fs)

	start := time.Now()
	sweepQueries(t, ctx, st)
	swept := time.Since(start)
	called := callEveryMethod(t, ctx, st)
	t.Logf("sweep %v, %d Store methods %v", swept.Round(time.Millisecond), called, (time.Since(start) - swept).Round(time.Millisecond))

	var missing []*recorded
	for _, r := range rec.all() {
		how, ok := ix.serve(r.shape)
		if !ok {
			missing = append(missing, r)
			how = "NO INDEX"
		}
		t.Logf("%-90s  %s  [%s]", r.shape, strings.ReplaceAll(how, "module.firestore.google_firestore_index.", ""), shortFuncs(keys(r.callers)))
	}
	t.Logf("%d query shapes, %d without an index", len(rec.all()), len(missing))
	for _, r := range missing {
		t.Errorf("no index serves %s (issued by %s): add a composite index to terraform/modules/firestore", r.shape, shortFuncs(keys(r.callers)))
	}

	// Each declared index is needed: without it some shape goes unserved,
	// which is also how this test fails when an index is removed.
	for i, removed := range ix.composite {
		less := tfIndexes{exempt: ix.exempt, composite: slices.Delete(slices.Clone(ix.composite), i, i+1)}
		var unserved []string
		for _, r := range rec.all() {
			if _, ok := less.serve(r.shape); !ok {
				unserved = append(unserved, r.shape.String())
			}
		}
		if len(unserved) == 0 {
			t.Errorf("without %s every query shape is still served: no query needs it", removed.Address)
		}
	}

	for _, fn := range queryBuilders(t, testenv.ModuleRoot(t)) {
		if !fn.reached(rec) {
			t.Errorf("%s (%s) builds a Firestore query this test never saw sent: put the query in a shared/store method (all of which this test calls) or make the test reach it", shortFunc(fn.name), fn.pos)
		}
	}
}

// TestServeRules pins the index rules on hand-made shapes.
func TestServeRules(t *testing.T) {
	t.Parallel()
	desc := func(p string) orderField { return orderField{Path: p, Desc: true} }
	asc := func(p string) orderField { return orderField{Path: p} }
	ix := tfIndexes{
		composite: []index{
			{Address: "tenant_desc", Collection: "c", Fields: []orderField{asc("tenant"), desc("created_at")}},
			{Address: "status_desc", Collection: "c", Fields: []orderField{asc("status"), desc("created_at")}},
			{Address: "pair", Collection: "c", Fields: []orderField{asc("a"), asc("b"), asc("t")}},
		},
		exempt: map[string]bool{"c/expire_at": true},
	}
	tests := []struct {
		s    shape
		want string // "" = no index
	}{
		{shape{Collection: "c"}, "built-in (no filter, no order)"},
		{shape{Collection: "c", Equal: []string{"a", "b", "z"}}, "single-field indexes (automatic)"},
		{shape{Collection: "c", Equal: []string{"expire_at"}}, ""},
		{shape{Collection: "c", Orders: []orderField{desc("created_at")}}, "single-field index on created_at (automatic)"},
		{shape{Collection: "c", Orders: []orderField{asc("expire_at")}}, ""},
		{shape{Collection: "c", Equal: []string{"tenant"}, Orders: []orderField{desc("created_at")}}, "tenant_desc"},
		{shape{Collection: "c", Equal: []string{"tenant"}, Orders: []orderField{asc("created_at")}}, ""},
		{shape{Collection: "c", Equal: []string{"status", "tenant"}, Orders: []orderField{desc("created_at")}}, "merge of status_desc + tenant_desc"},
		{shape{Collection: "c", Equal: []string{"category", "tenant"}, Orders: []orderField{desc("created_at")}}, ""},
		{shape{Collection: "c", Equal: []string{"a", "b"}, Orders: []orderField{asc("t")}}, "pair"},
		{shape{Collection: "c", Equal: []string{"a"}, Orders: []orderField{asc("t")}}, ""},
		{shape{Collection: "other", Equal: []string{"tenant"}, Orders: []orderField{desc("created_at")}}, ""},
		{shape{Collection: "c", Group: true}, ""},
	}
	for _, tt := range tests {
		got, ok := ix.serve(tt.s)
		if !ok {
			got = ""
		}
		if got != tt.want {
			t.Errorf("serve(%s) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

// recordingClient is a Firestore client of the emulator, for a project of
// the test's own, whose queries rec records.
func recordingClient(t *testing.T, ctx context.Context, rec *recorder) *firestore.Client {
	t.Helper()
	host := testenv.FirestoreHost(t)
	// With FIRESTORE_EMULATOR_HOST set the client dials its own connection
	// and ignores dial options, so it gets one made here (a later
	// WithGRPCConn wins), with the emulator's owner credentials as its own.
	conn, err := grpc.NewClient(host,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(emulatorOwner{}),
		grpc.WithChainStreamInterceptor(rec.interceptor()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s) = %v", host, err)
	}
	fs, err := firestore.NewClient(ctx, testenv.Project(t), option.WithGRPCConn(conn))
	if err != nil {
		t.Fatalf("firestore.NewClient() = %v", err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}

// emulatorOwner bypasses the emulator's security rules, as the client's
// own emulator credentials do.
type emulatorOwner struct{}

func (emulatorOwner) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}

func (emulatorOwner) RequireTransportSecurity() bool { return false }

// sweepQueries sends store.Query in every combination of equality filters,
// range and order, through Entries and Count.
func sweepQueries(t *testing.T, ctx context.Context, st *store.Store) {
	t.Helper()
	qt := reflect.TypeFor[store.Query]()
	var eqFields, rangeFields []int
	for i := range qt.NumField() {
		f := qt.Field(i)
		switch {
		case f.Type.Kind() == reflect.String:
			eqFields = append(eqFields, i)
		case f.Type == reflect.TypeFor[time.Time]():
			rangeFields = append(rangeFields, i)
		}
	}
	if len(eqFields) == 0 || len(rangeFields) < 2 {
		t.Fatalf("store.Query has %d equality and %d range fields; the sweep expects both", len(eqFields), len(rangeFields))
	}
	var orders []store.Order
	for o := store.Order(0); ; o++ {
		if _, err := st.Entries(ctx, store.Query{Order: o, Limit: 1}); errors.Is(err, store.ErrBadQuery) {
			break
		} else if err != nil {
			t.Fatalf("Entries(order %d) = %v", o, err)
		}
		orders = append(orders, o)
	}
	now := time.Now()
	type job struct {
		q     store.Query
		count bool
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for range 6 {
		wg.Go(func() {
			for j := range jobs {
				var err error
				if j.count {
					_, err = st.Count(ctx, j.q)
				} else {
					_, err = st.Entries(ctx, j.q)
				}
				if err != nil && !errors.Is(err, store.ErrBadQuery) {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%+v: %v", j.q, err))
					mu.Unlock()
				}
			}
		})
	}
	// The time fields in the sets a query may hold: none, the created_at
	// range (the first two), each later one (a due time) alone.
	rangeSets := [][]int{nil, rangeFields[:2]}
	for _, i := range rangeFields[2:] {
		rangeSets = append(rangeSets, []int{i})
	}
	// send sends q with the time fields of ranged set, counted and in
	// each order.
	send := func(q store.Query, ranged []int) {
		v := reflect.ValueOf(&q).Elem()
		for k, i := range ranged {
			v.Field(i).Set(reflect.ValueOf(now.Add(time.Duration(k-1) * time.Hour)))
		}
		jobs <- job{q: q, count: true}
		for _, o := range orders {
			q.Order = o
			jobs <- job{q: q}
		}
	}
	for mask := 0; mask < 1<<len(eqFields); mask++ {
		for _, ranged := range rangeSets {
			q := store.Query{Limit: 1}
			v := reflect.ValueOf(&q).Elem()
			for b, i := range eqFields {
				if mask&(1<<b) != 0 {
					v.Field(i).SetString("x")
				}
			}
			send(q, ranged)
			// FoldCase reads tenant_fold and agent_fold for the tenant
			// and agent: their own indexes.
			if q.Tenant != "" || q.Agent != "" {
				q.FoldCase = true
				send(q, ranged)
			}
		}
	}
	// Statuses (status in …) stands for Status: the same shape, so the
	// combinations above cover it; these send it, alone and with another
	// filter, in each order and range.
	for _, ranged := range rangeSets {
		for _, tenant := range []string{"", "x"} {
			send(store.Query{Limit: 1, Tenant: tenant, Statuses: []store.Status{store.Escalated, store.Quarantined}}, ranged)
		}
	}
	close(jobs)
	wg.Wait()
	for _, f := range failures {
		t.Errorf("query failed on the emulator: %s", f)
	}
}

// callEveryMethod calls each exported method of *store.Store but the two
// the sweep covers, with made-up arguments, and returns how many it called.
// Most fail their own checks or find nothing; what matters is the queries
// they send on the way. A panic (nil pointer from a made-up argument) ends
// only that call.
func callEveryMethod(t *testing.T, ctx context.Context, st *store.Store) int {
	t.Helper()
	v := reflect.ValueOf(st)
	n := 0
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		if m.Name == "Entries" || m.Name == "Count" {
			continue
		}
		n++
		// Once with names that pass the syntax checks, once with empty
		// ones: an empty cursor or filter is what reaches some queries.
		for _, name := range []string{"TASKS.1", ""} {
			callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			args := make([]reflect.Value, m.Type.NumIn()-1)
			for a := range args {
				args[a] = madeUp(m.Type.In(a+1), callCtx, name)
				if v, ok := wellFormed[m.Type.In(a+1)]; ok && name != "" {
					args[a] = reflect.ValueOf(v)
				}
			}
			func() {
				defer func() { _ = recover() }()
				v.Method(i).Call(args)
			}()
			cancel()
		}
	}
	return n
}

var ctxType = reflect.TypeFor[context.Context]()

// wellFormed are arguments whose checks a made-up value never passes (an
// id of the form the store makes), so the method would refuse it before
// its query.
var wellFormed = map[reflect.Type]any{
	reflect.TypeFor[store.NewWebhook](): store.NewWebhook{ID: "0123456789abcdef", Tenant: "TASKS.1", URL: "https://hooks.example/", By: "TASKS.1", SealedSecret: []byte("{}")},
}

// madeUp returns a plausible value of t: name for strings, a minute for durations, now for
// times, empty structs, functions returning zero values.
func madeUp(t reflect.Type, ctx context.Context, name string) reflect.Value {
	switch {
	case t == ctxType:
		return reflect.ValueOf(ctx)
	case t == reflect.TypeFor[time.Duration]():
		return reflect.ValueOf(time.Minute)
	case t == reflect.TypeFor[time.Time]():
		return reflect.ValueOf(time.Now())
	}
	switch t.Kind() {
	case reflect.String:
		return reflect.ValueOf(name).Convert(t)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return reflect.ValueOf(int64(10)).Convert(t)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return reflect.ValueOf(uint64(10)).Convert(t)
	case reflect.Float32, reflect.Float64:
		return reflect.ValueOf(1.0).Convert(t)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return reflect.ValueOf([]byte("{}")).Convert(t)
		}
		s := reflect.MakeSlice(t, 1, 1)
		s.Index(0).Set(madeUp(t.Elem(), ctx, name))
		return s
	case reflect.Map:
		return reflect.MakeMap(t)
	case reflect.Pointer:
		return reflect.New(t.Elem())
	case reflect.Func:
		return reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, t.NumOut())
			for i := range out {
				out[i] = reflect.Zero(t.Out(i))
			}
			return out
		})
	case reflect.Interface:
		if t.NumMethod() == 0 {
			return reflect.ValueOf(&map[string]any{})
		}
	}
	return reflect.Zero(t)
}

// queryBuilder is a function in deployed code that builds a Firestore
// query, and the functions of its package it calls (a helper that only
// builds the query is reached through its caller).
type queryBuilder struct {
	name    string // as runtime names it
	pos     string
	callers []string // functions of the same package that call it
}

func (q queryBuilder) reached(rec *recorder) bool {
	if rec.issued(q.name) {
		return true
	}
	return slices.ContainsFunc(q.callers, rec.issued)
}

// queryMethods are the firestore.Query methods that make a query need an
// index.
var queryMethods = map[string]bool{"Where": true, "WhereEntity": true, "OrderBy": true, "FindNearest": true}

// queryBuilders scans the deployed code (everything but tests, internal/,
// emulator/, tools/ and examples/) for functions that call a query method.
func queryBuilders(t *testing.T, root string) []queryBuilder {
	t.Helper()
	type fn struct {
		name, pos string
		calls     map[string]bool
		builds    bool
	}
	byPkg := map[string][]*fn{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "internal" || rel == "emulator" || rel == "tools" || rel == "examples" || rel == "terraform" || rel == "docs":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		pkg := strings.TrimSuffix(module, "/")
		if dir != "." {
			pkg = module + dir
		}
		if f.Name.Name == "main" {
			pkg = "main" // as runtime names a command's functions
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := pkg + "." + fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				switch rt := fd.Recv.List[0].Type.(type) {
				case *ast.StarExpr:
					name = pkg + ".(*" + typeName(rt.X) + ")." + fd.Name.Name
				default:
					name = pkg + "." + typeName(rt) + "." + fd.Name.Name
				}
			}
			x := &fn{name: name, pos: fmt.Sprintf("%s:%d", rel, fset.Position(fd.Pos()).Line), calls: map[string]bool{}}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch fun := call.Fun.(type) {
				case *ast.SelectorExpr:
					if queryMethods[fun.Sel.Name] {
						x.builds = true
					}
					x.calls[fun.Sel.Name] = true
				case *ast.Ident:
					x.calls[fun.Name] = true
				}
				return true
			})
			byPkg[dir] = append(byPkg[dir], x)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s: %v", root, err)
	}
	var out []queryBuilder
	for _, fns := range byPkg {
		for _, b := range fns {
			if !b.builds {
				continue
			}
			short := b.name[strings.LastIndex(b.name, ".")+1:]
			qb := queryBuilder{name: b.name, pos: b.pos}
			for _, c := range fns {
				if c != b && c.calls[short] {
					qb.callers = append(qb.callers, c.name)
				}
			}
			out = append(out, qb)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	if len(out) == 0 {
		t.Fatal("the source scan found no function building a Firestore query; expected shared/store's")
	}
	return out
}

func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return typeName(x.X)
	case *ast.IndexListExpr:
		return typeName(x.X)
	}
	return "?"
}
