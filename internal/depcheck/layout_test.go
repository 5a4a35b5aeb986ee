package depcheck

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// The Firestore client library. Its subpackages (apiv1, the protos) are
// the same client by another door.
const firestoreClient = "cloud.google.com/go/firestore"

// firestoreAllowed are the module's packages that may import the Firestore
// client besides shared/store/..., which owns every document, each with why.
var firestoreAllowed = map[string]string{
	// The agent kit writes the completion records itself, in the agent's
	// process, inside the transaction that claims the task; the store split
	// (issue 33, part 3) decides their final home.
	module + "/shared/agentkit": "the agent kit's completion records",
	// Test infrastructure hands tests a client of the emulator.
	module + "/internal/": "test infrastructure",
	// The load driver measures the database itself: when each entry was
	// created, as Firestore stamped it.
	module + "/tools/loadgen": "the load driver's measurements",
}

// Only the store reads and writes Firestore documents: everything else asks
// it in aggregates and typed queries (a second reader of a document is a
// second, drifting definition of its fields).
func TestOnlyStoreImportsFirestore(t *testing.T) {
	g := importGraph(t, false, module+"/...")
	store := false
	for _, p := range slices.Sorted(maps.Keys(g)) {
		for _, i := range g[p] {
			if i != firestoreClient && !strings.HasPrefix(i, firestoreClient+"/") {
				continue
			}
			if strings.HasPrefix(p, module+"/shared/store") {
				store = true
				continue
			}
			if !allowedBy(firestoreAllowed, p) {
				t.Errorf("%s imports %s; only %s/shared/store/... may (and %v)", p, i, module, slices.Sorted(maps.Keys(firestoreAllowed)))
			}
		}
	}
	if !store {
		t.Errorf("no package under %s/shared/store imports %s: the check looks at the wrong tree", module, firestoreClient)
	}
}

// allowedBy reports whether p is a key of allowed, or under one ending in
// "/".
func allowedBy(allowed map[string]string, p string) bool {
	for a := range allowed {
		if p == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(p, a)) {
			return true
		}
	}
	return false
}

// storeMayNotImport are the callers of the store: it serves them and never
// reaches back. storeImportsNow are the exceptions that stand until the
// store is split by aggregate (issue 33, part 3): the completion records'
// type and collection live in the agent kit today.
var (
	storeMayNotImport = []string{module + "/shared/agentkit", module + "/console", module + "/functions/",
		module + "/cmd/", module + "/bridge", module + "/shared/operator", module + "/shared/reconciler"}
	storeImportsNow = map[string]string{module + "/shared/agentkit": "completion records (until the store split)"}
)

func TestStoreImportsNoCaller(t *testing.T) {
	g := importGraph(t, false, module+"/shared/store/...")
	if len(g) == 0 {
		t.Fatalf("go list %s/shared/store/... found nothing", module)
	}
	for _, p := range slices.Sorted(maps.Keys(g)) {
		for _, i := range g[p] {
			if !underAny(storeMayNotImport)(i) && !slices.Contains(storeMayNotImport, i) {
				continue
			}
			if _, ok := storeImportsNow[i]; ok {
				continue
			}
			t.Errorf("%s imports %s: the store may not import its callers", p, i)
		}
	}
}

// publicPackages are what an example may import of this module: the kits
// and the wire contract, what a user of jsdlq imports. Everything else is
// jsdlq's own machinery, free to change under a user.
var publicPackages = []string{module + "/shared/agentkit", module + "/shared/event"}

// The examples are written the way a user writes an agent: on the public
// packages alone (their tests may use test infrastructure).
func TestExamplesImportOnlyPublic(t *testing.T) {
	pkgs := goList(t, "-e", "-f", "{{.ImportPath}}", module+"/examples/...")
	if len(pkgs) == 0 {
		t.Fatalf("go list %s/examples/... found nothing: the check would check nothing", module)
	}
	g := importGraph(t, false, pkgs...)
	for _, p := range slices.Sorted(maps.Keys(g)) {
		for _, i := range g[p] {
			if !strings.HasPrefix(i, module+"/") || slices.Contains(publicPackages, i) || strings.HasPrefix(i, p+"/") {
				continue
			}
			t.Errorf("%s imports %s; an example imports only %v", p, i, publicPackages)
		}
	}
}

func TestAllowedBy(t *testing.T) {
	allowed := map[string]string{"m/a": "", "m/tree/": ""}
	tests := []struct {
		p    string
		want bool
	}{
		{"m/a", true},
		{"m/ab", false},
		{"m/a/sub", false},
		{"m/tree/x", true},
		{"m/tree", false},
	}
	for _, tt := range tests {
		if got := allowedBy(allowed, tt.p); got != tt.want {
			t.Errorf("allowedBy(%v, %q) = %t, want %t", slices.Sorted(maps.Keys(allowed)), tt.p, got, tt.want)
		}
	}
}
