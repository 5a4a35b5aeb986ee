package outcome_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/outcome"
)

// surfaced are the packages whose errors the console, the tenant API and
// dlqctl answer: every exported Err* variable of theirs has an outcome.
var surfaced = []string{"agentkit", "auth", "authority", "config", "event", "hooksecret", "natsconn", "operator", "predict",
	"reconciler", "redrive", "secretbox", "store", "tasks", "triage", "webhook"}

// exportedErrs are the exported package-level Err* variables of the
// surfaced packages, as "pkg.ErrX", read from their source.
func exportedErrs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pkg := range surfaced {
		dir := filepath.Join("..", pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.VAR {
					continue
				}
				for _, spec := range gd.Specs {
					for _, name := range spec.(*ast.ValueSpec).Names {
						if strings.HasPrefix(name.Name, "Err") && name.IsExported() {
							out = append(out, pkg+"."+name.Name)
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// The table covers every exported sentinel of the surfaced packages, and no
// other name.
func TestEverySentinelHasAnOutcome(t *testing.T) {
	var names []string
	for _, s := range outcome.Sentinels {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if diff := cmp.Diff(exportedErrs(t), names); diff != "" {
		t.Errorf("outcome.Sentinels against the packages' exported Err* variables (-exported +table):\n%s", diff)
	}
}

// Each sentinel, wrapped as callers wrap it, answers as the table says on
// every surface: no earlier sentinel of another outcome shadows it; and each
// kind has one HTTP status, one API code and one exit code (the triage
// answers' 422 the one exception, which agentkit reads back).
func TestOutcomeOfEverySentinel(t *testing.T) {
	kinds := map[outcome.Kind]struct {
		http int
		code string
		exit int
	}{
		outcome.Invalid:         {http.StatusBadRequest, "invalid_argument", outcome.ExitUsage},
		outcome.Unauthenticated: {http.StatusUnauthorized, "unauthenticated", outcome.ExitError},
		outcome.Denied:          {http.StatusForbidden, "permission_denied", outcome.ExitError},
		outcome.NotFound:        {http.StatusNotFound, "not_found", outcome.ExitNotFound},
		outcome.Conflict:        {http.StatusConflict, "failed_precondition", outcome.ExitConflict},
		outcome.Unavailable:     {http.StatusServiceUnavailable, "unavailable", outcome.ExitError},
		outcome.Internal:        {http.StatusInternalServerError, "internal", outcome.ExitError},
	}
	for _, s := range outcome.Sentinels {
		err := fmt.Errorf("layer: %w", fmt.Errorf("op %q: %w", "x", s.Err))
		got := outcome.Of(err)
		if got != s.Outcome {
			t.Errorf("Of(%s wrapped) = %+v, want %+v", s.Name, got, s.Outcome)
		}
		k, ok := kinds[got.Kind]
		if !ok {
			t.Errorf("Of(%s) kind %q, want one of %v", s.Name, got.Kind, slices.Collect(maps.Keys(kinds)))
			continue
		}
		want := k.http
		if s.Name == "agentkit.ErrTriageRefused" {
			want = http.StatusUnprocessableEntity
		}
		if got.HTTP != want || got.Code() != k.code || got.Exit != k.exit {
			t.Errorf("Of(%s) = HTTP %d, code %s, exit %d; want %d, %s, %d", s.Name, got.HTTP, got.Code(), got.Exit, want, k.code, k.exit)
		}
	}
}

// The answers the surfaces used to disagree on, and the defaults.
func TestOutcomeDisagreementsSettled(t *testing.T) {
	byName := map[string]error{}
	for _, s := range outcome.Sentinels {
		byName[s.Name] = s.Err
	}
	for _, tc := range []struct {
		err  error
		want outcome.Outcome
	}{
		// A 400 in the UI, a 500 in the API before.
		{byName["store.ErrInvalid"], outcome.Outcome{Kind: outcome.Invalid, HTTP: 400, Exit: outcome.ExitUsage}},
		// A 400 in the console, a conflict (exit 4) in dlqctl before.
		{byName["operator.ErrBadEdit"], outcome.Outcome{Kind: outcome.Invalid, HTTP: 400, Exit: outcome.ExitUsage}},
		{byName["operator.ErrBadReason"], outcome.Outcome{Kind: outcome.Invalid, HTTP: 400, Exit: outcome.ExitUsage}},
		{byName["store.ErrBreakerOverride"], outcome.Outcome{Kind: outcome.Conflict, HTTP: 409, Exit: outcome.ExitConflict}},
		{byName["store.ErrConflict"], outcome.Outcome{Kind: outcome.Conflict, HTTP: 409, Exit: outcome.ExitConflict, Retryable: true}},
		{errors.New("firestore: deadline exceeded"), outcome.Outcome{Kind: outcome.Internal, HTTP: 500, Exit: outcome.ExitError, Retryable: true}},
		{nil, outcome.Outcome{}},
	} {
		if got := outcome.Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %+v, want %+v", tc.err, got, tc.want)
		}
	}
}
