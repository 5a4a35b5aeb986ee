package tfschema

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// PlanValue turns a proposed new state into a planned state the way a
// provider without custom plan logic would: write-only attributes are null
// (Terraform never stores them) and, when the object is being created,
// computed attributes the configuration left null are unknown.
func PlanValue(b *tfprotov6.SchemaBlock, proposed tftypes.Value, create bool) (tftypes.Value, error) {
	planned, err := tftypes.Transform(proposed, func(p *tftypes.AttributePath, v tftypes.Value) (tftypes.Value, error) {
		a := attributeAt(b, p.Steps())
		switch {
		case a == nil:
			return v, nil
		case a.WriteOnly:
			return tftypes.NewValue(v.Type(), nil), nil
		case create && a.Computed && v.IsNull():
			return tftypes.NewValue(v.Type(), tftypes.UnknownValue), nil
		}
		return v, nil
	})
	if err != nil {
		return tftypes.Value{}, fmt.Errorf("tfschema: plan: %w", err)
	}
	return planned, nil
}

// computedOnlySet reports every attribute the configuration sets although
// the schema marks it computed only (neither required nor optional).
// Terraform core does not check this; the providers themselves do.
func computedOnlySet(sc *tfprotov6.Schema, config *tfprotov6.DynamicValue) ([]*tfprotov6.Diagnostic, error) {
	if sc == nil || config == nil {
		return nil, nil
	}
	v, err := config.Unmarshal(sc.ValueType())
	if err != nil {
		return nil, fmt.Errorf("tfschema: decode config: %w", err)
	}
	var diags []*tfprotov6.Diagnostic
	err = tftypes.Walk(v, func(p *tftypes.AttributePath, v tftypes.Value) (bool, error) {
		a := attributeAt(sc.Block, p.Steps())
		if a == nil || v.IsNull() {
			return true, nil
		}
		if a.Computed && !a.Optional && !a.Required {
			diags = append(diags, &tfprotov6.Diagnostic{
				Severity:  tfprotov6.DiagnosticSeverityError,
				Summary:   "Computed attribute cannot be set",
				Detail:    fmt.Sprintf("%q is computed by the provider and cannot be set in configuration; remove it.", a.Name),
				Attribute: p,
			})
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("tfschema: walk config: %w", err)
	}
	return diags, nil
}

// Placeholder is the string every placeholder-filled attribute reads.
const Placeholder = "tfschema-placeholder"

// PlaceholderValue fills the computed top-level attributes a configuration
// left null with placeholders of their type, so that a data source read
// offline yields a wholly known object (see WithPlaceholderData).
func PlaceholderValue(b *tfprotov6.SchemaBlock, config tftypes.Value) (tftypes.Value, error) {
	filled, err := tftypes.Transform(config, func(p *tftypes.AttributePath, v tftypes.Value) (tftypes.Value, error) {
		if len(p.Steps()) != 1 || !v.IsNull() {
			return v, nil
		}
		a := attributeAt(b, p.Steps())
		if a == nil || !a.Computed || a.WriteOnly {
			return v, nil
		}
		return placeholderOf(v.Type()), nil
	})
	if err != nil {
		return tftypes.Value{}, fmt.Errorf("tfschema: placeholder: %w", err)
	}
	return filled, nil
}

func placeholderOf(t tftypes.Type) tftypes.Value {
	switch t.(type) {
	case tftypes.List, tftypes.Set:
		return tftypes.NewValue(t, []tftypes.Value{})
	case tftypes.Map:
		return tftypes.NewValue(t, map[string]tftypes.Value{})
	}
	switch {
	case t.Is(tftypes.String):
		return tftypes.NewValue(t, Placeholder)
	case t.Is(tftypes.Number):
		return tftypes.NewValue(t, 0)
	case t.Is(tftypes.Bool):
		return tftypes.NewValue(t, false)
	}
	// Objects, tuples and dynamic values stay null: there is no neutral
	// value of their shape.
	return tftypes.NewValue(t, nil)
}

// attributeAt finds the schema attribute a value path ends at, or nil when
// the path ends at a block, inside a plain-typed attribute, or nowhere.
func attributeAt(b *tfprotov6.SchemaBlock, steps []tftypes.AttributePathStep) *tfprotov6.SchemaAttribute {
	for len(steps) > 0 {
		name, ok := steps[0].(tftypes.AttributeName)
		if !ok {
			return nil
		}
		steps = steps[1:]
		if a := findAttribute(b.Attributes, string(name)); a != nil {
			return nestedAttributeAt(a, steps)
		}
		nb := findBlock(b.BlockTypes, string(name))
		if nb == nil {
			return nil
		}
		switch nb.Nesting {
		case tfprotov6.SchemaNestedBlockNestingModeList, tfprotov6.SchemaNestedBlockNestingModeSet, tfprotov6.SchemaNestedBlockNestingModeMap:
			// The block's own collection value, or one element: neither is
			// an attribute. Otherwise step past the element key.
			if len(steps) < 2 {
				return nil
			}
			if _, isName := steps[0].(tftypes.AttributeName); isName {
				return nil
			}
			steps = steps[1:]
		}
		b = nb.Block
	}
	return nil
}

func nestedAttributeAt(a *tfprotov6.SchemaAttribute, steps []tftypes.AttributePathStep) *tfprotov6.SchemaAttribute {
	for len(steps) > 0 {
		if a.NestedType == nil {
			return nil
		}
		if a.NestedType.Nesting != tfprotov6.SchemaObjectNestingModeSingle {
			if _, isName := steps[0].(tftypes.AttributeName); isName {
				return nil
			}
			steps = steps[1:]
			if len(steps) == 0 {
				return nil
			}
		}
		name, ok := steps[0].(tftypes.AttributeName)
		if !ok {
			return nil
		}
		steps = steps[1:]
		if a = findAttribute(a.NestedType.Attributes, string(name)); a == nil {
			return nil
		}
	}
	return a
}

func findAttribute(attrs []*tfprotov6.SchemaAttribute, name string) *tfprotov6.SchemaAttribute {
	for _, a := range attrs {
		if a.Name == name {
			return a
		}
	}
	return nil
}

func findBlock(blocks []*tfprotov6.SchemaNestedBlock, name string) *tfprotov6.SchemaNestedBlock {
	for _, nb := range blocks {
		if nb.TypeName == name {
			return nb
		}
	}
	return nil
}
