// Package tfvars reads the defaults of a Terraform module's variables, as
// Terraform itself parses them (HCL), for tests that hold Terraform's
// defaults and Go's to each other.
package tfvars

import (
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// ErrNoDefault reports a variable that has no default in the file.
var ErrNoDefault = errors.New("tfvars: no default")

// Defaults reads path (a variables.tf) and evaluates the default of each
// variable that has one. A default must be a constant: it may not refer to
// variables or call functions, as Terraform requires.
func Defaults(path string) (map[string]cty.Value, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tfvars: read %s: %w", path, err)
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("tfvars: parse %s: %w", path, diags)
	}
	out := map[string]cty.Value{}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "variable" || len(b.Labels) != 1 {
			continue
		}
		attr, ok := b.Body.Attributes["default"]
		if !ok {
			continue
		}
		v, diags := attr.Expr.Value(nil)
		if diags.HasErrors() {
			return nil, fmt.Errorf("tfvars: %s: variable %q: %w", path, b.Labels[0], diags)
		}
		out[b.Labels[0]] = v
	}
	return out, nil
}

// String is the default of variable name as a string.
func String(defaults map[string]cty.Value, name string) (string, error) {
	v, ok := defaults[name]
	switch {
	case !ok:
		return "", fmt.Errorf("%w for variable %q", ErrNoDefault, name)
	case v.Type() != cty.String || v.IsNull():
		return "", fmt.Errorf("tfvars: variable %q: default is %s, not a string", name, v.Type().FriendlyName())
	}
	return v.AsString(), nil
}

// Strings is the default of variable name as a list of strings (a list or
// tuple of strings).
func Strings(defaults map[string]cty.Value, name string) ([]string, error) {
	v, ok := defaults[name]
	if !ok {
		return nil, fmt.Errorf("%w for variable %q", ErrNoDefault, name)
	}
	if v.IsNull() || !(v.Type().IsListType() || v.Type().IsTupleType()) {
		return nil, fmt.Errorf("tfvars: variable %q: default is %s, not a list", name, v.Type().FriendlyName())
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.Type() != cty.String || e.IsNull() {
			return nil, fmt.Errorf("tfvars: variable %q: an element is %s, not a string", name, e.Type().FriendlyName())
		}
		out = append(out, e.AsString())
	}
	return out, nil
}
