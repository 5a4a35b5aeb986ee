// Command storecensus measures shared/store for the split (docs/decisions/store-split.md): the
// exported methods of each store type, the package's exported names, and which methods of
// *store.Store each other package calls. It is a measuring tool, never linked into a binary.
//
//	go run ./internal/storecensus [-tests]
package main

import (
	"flag"
	"fmt"
	"go/types"
	"log"
	"os"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

const storePath = "github.com/jsdlq/jsdlq/shared/store"

func main() {
	tests := flag.Bool("tests", false, "count calls from _test.go files too")
	flag.Parse()
	cfg := &packages.Config{
		Mode:  packages.NeedName | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedSyntax | packages.NeedImports | packages.NeedDeps,
		Tests: *tests,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		log.Fatalf("storecensus: load: %v", err)
	}
	var store *types.Package
	calls := map[string]map[string]bool{} // caller package -> Store methods it calls
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		if p.PkgPath == storePath && store == nil && p.Types != nil {
			store = p.Types
		}
	})
	for _, p := range pkgs {
		if p.TypesInfo == nil || strings.HasPrefix(p.PkgPath, storePath) {
			continue
		}
		caller := strings.TrimSuffix(strings.TrimPrefix(p.PkgPath, "github.com/jsdlq/jsdlq/"), ".test")
		caller = strings.TrimSuffix(caller, "_test")
		for _, sel := range p.TypesInfo.Selections {
			if sel.Kind() != types.MethodVal {
				continue
			}
			fn, ok := sel.Obj().(*types.Func)
			if !ok || fn.Pkg() == nil || fn.Pkg().Path() != storePath {
				continue
			}
			recv := types.Unalias(fn.Signature().Recv().Type())
			if ptr, ok := recv.(*types.Pointer); ok {
				recv = ptr.Elem()
			}
			named, ok := recv.(*types.Named)
			if !ok || named.Obj().Name() != "Store" {
				continue
			}
			if calls[caller] == nil {
				calls[caller] = map[string]bool{}
			}
			calls[caller][fn.Name()] = true
		}
	}
	if store == nil {
		log.Fatalf("storecensus: %s not loaded", storePath)
	}
	report(store, calls)
}

func report(store *types.Package, calls map[string]map[string]bool) {
	w := os.Stdout
	scope := store.Scope()
	kinds := map[string]int{}
	type typeCount struct {
		name string
		n    int
	}
	var counts []typeCount
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.TypeName:
			kinds["types"]++
			if named, ok := o.Type().(*types.Named); ok {
				n := 0
				ms := types.NewMethodSet(types.NewPointer(named))
				for i := range ms.Len() {
					if ms.At(i).Obj().Exported() {
						n++
					}
				}
				if n > 0 {
					counts = append(counts, typeCount{name, n})
				}
			}
		case *types.Func:
			kinds["funcs"]++
		case *types.Const:
			kinds["consts"]++
		case *types.Var:
			kinds["vars"]++
		}
	}
	total := kinds["types"] + kinds["funcs"] + kinds["consts"] + kinds["vars"]
	fmt.Fprintf(w, "exported package-level names: %d (types %d, funcs %d, consts %d, vars %d)\n\n",
		total, kinds["types"], kinds["funcs"], kinds["consts"], kinds["vars"])
	sort.Slice(counts, func(i, j int) bool {
		return counts[i].n > counts[j].n || counts[i].n == counts[j].n && counts[i].name < counts[j].name
	})
	fmt.Fprintln(w, "| type | exported methods (pointer method set) |\n|---|---|")
	for _, c := range counts {
		fmt.Fprintf(w, "| `%s` | %d |\n", c.name, c.n)
	}
	var callers []string
	for c := range calls {
		callers = append(callers, c)
	}
	sort.Slice(callers, func(i, j int) bool {
		if len(calls[callers[i]]) != len(calls[callers[j]]) {
			return len(calls[callers[i]]) < len(calls[callers[j]])
		}
		return callers[i] < callers[j]
	})
	fmt.Fprintln(w, "\n| caller package | methods of `*store.Store` | which |\n|---|---|---|")
	for _, c := range callers {
		var ms []string
		for m := range calls[c] {
			ms = append(ms, m)
		}
		sort.Strings(ms)
		fmt.Fprintf(w, "| `%s` | %d | %s |\n", c, len(ms), strings.Join(ms, ", "))
	}
}
