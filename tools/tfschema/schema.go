// Package tfschema serves a Terraform provider schema taken from the output of
// `terraform providers schema -json`, so that `terraform init` and
// `terraform validate` can check a configuration against the real schema of a
// provider whose registry is out of reach. It never creates infrastructure:
// it accepts every configuration the schema allows and leaves the rejection
// of everything else to Terraform itself, which is the point — the errors a
// user sees are Terraform's own.
package tfschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// ErrProviderNotFound reports that the schema file has no entry for the
// requested provider address.
var ErrProviderNotFound = errors.New("tfschema: provider not in schema file")

// ErrInvalidSchema reports a schema document this package cannot convert.
var ErrInvalidSchema = errors.New("tfschema: invalid schema")

// The JSON shapes below follow Terraform's `providers schema -json` format
// (format_version 1.0).

type jsonProvider struct {
	Provider                 *jsonSchema              `json:"provider"`
	ResourceSchemas          map[string]*jsonSchema   `json:"resource_schemas"`
	DataSourceSchemas        map[string]*jsonSchema   `json:"data_source_schemas"`
	EphemeralResourceSchemas map[string]*jsonSchema   `json:"ephemeral_resource_schemas"`
	Functions                map[string]*jsonFunction `json:"functions"`
}

type jsonSchema struct {
	Version int64      `json:"version"`
	Block   *jsonBlock `json:"block"`
}

type jsonBlock struct {
	Attributes      map[string]*jsonAttribute `json:"attributes"`
	BlockTypes      map[string]*jsonBlockType `json:"block_types"`
	Description     string                    `json:"description"`
	DescriptionKind string                    `json:"description_kind"`
	Deprecated      bool                      `json:"deprecated"`
}

type jsonAttribute struct {
	Type            json.RawMessage `json:"type"`
	NestedType      *jsonNestedType `json:"nested_type"`
	Description     string          `json:"description"`
	DescriptionKind string          `json:"description_kind"`
	Deprecated      bool            `json:"deprecated"`
	Required        bool            `json:"required"`
	Optional        bool            `json:"optional"`
	Computed        bool            `json:"computed"`
	Sensitive       bool            `json:"sensitive"`
	WriteOnly       bool            `json:"write_only"`
}

type jsonNestedType struct {
	Attributes  map[string]*jsonAttribute `json:"attributes"`
	NestingMode string                    `json:"nesting_mode"`
}

type jsonBlockType struct {
	NestingMode string     `json:"nesting_mode"`
	Block       *jsonBlock `json:"block"`
	MinItems    int64      `json:"min_items"`
	MaxItems    int64      `json:"max_items"`
}

type jsonFunction struct {
	Description        string               `json:"description"`
	Summary            string               `json:"summary"`
	DeprecationMessage string               `json:"deprecation_message"`
	ReturnType         json.RawMessage      `json:"return_type"`
	Parameters         []*jsonFunctionParam `json:"parameters"`
	VariadicParameter  *jsonFunctionParam   `json:"variadic_parameter"`
}

type jsonFunctionParam struct {
	Name               string          `json:"name"`
	Description        string          `json:"description"`
	DescriptionKind    string          `json:"description_kind"`
	Type               json.RawMessage `json:"type"`
	IsNullable         bool            `json:"is_nullable"`
	AllowNullValue     bool            `json:"allow_null_value"`
	AllowUnknownValues bool            `json:"allow_unknown_values"`
}

// Provider is one provider's schema converted to the plugin protocol (v6).
type Provider struct {
	Address            string
	Schema             *tfprotov6.Schema
	Resources          map[string]*tfprotov6.Schema
	DataSources        map[string]*tfprotov6.Schema
	EphemeralResources map[string]*tfprotov6.Schema
	Functions          map[string]*tfprotov6.Function
}

// LoadFile reads a `terraform providers schema -json` document and converts
// the schema of the provider at address (for example
// "registry.terraform.io/hashicorp/google").
func LoadFile(path, address string) (*Provider, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tfschema: open schema file: %w", err)
	}
	defer f.Close()
	return Load(f, address)
}

// Load is LoadFile for an already open document.
func Load(r io.Reader, address string) (*Provider, error) {
	jp, known, err := decodeProvider(r, address)
	if err != nil {
		return nil, err
	}
	if jp == nil {
		sort.Strings(known)
		return nil, fmt.Errorf("%w: %q (file has %v)", ErrProviderNotFound, address, known)
	}
	return convertProvider(address, jp)
}

// decodeProvider reads the document (format_version, and provider_schemas
// holding each provider by address) as a stream and decodes the provider at
// address alone, in one pass over its bytes: the plugin starts
// for every terraform command, and the google provider is megabytes. The
// rest of the document is read too, so that a damaged file fails wherever
// it is damaged. It returns nil and the addresses the file holds when
// address is not among them.
func decodeProvider(r io.Reader, address string) (*jsonProvider, []string, error) {
	dec := json.NewDecoder(r)
	fail := func(err error) (*jsonProvider, []string, error) {
		return nil, nil, fmt.Errorf("%w: decode schema document: %v", ErrInvalidSchema, err)
	}
	var found *jsonProvider
	var known []string
	err := eachMember(dec, func(key string) error {
		if key != "provider_schemas" {
			var skip json.RawMessage
			return dec.Decode(&skip)
		}
		return eachMember(dec, func(addr string) error {
			known = append(known, addr)
			if addr != address {
				var skip json.RawMessage
				return dec.Decode(&skip)
			}
			found = &jsonProvider{}
			if err := dec.Decode(found); err != nil {
				return fmt.Errorf("provider %q: %w", address, err)
			}
			return nil
		})
	})
	if err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail(fmt.Errorf("data after the document (%v)", err))
	}
	return found, known, nil
}

// eachMember reads a JSON object from dec, calling member with each key;
// member must read the key's value.
func eachMember(dec *json.Decoder, member func(key string) error) error {
	if tok, err := dec.Token(); err != nil {
		return err
	} else if tok != json.Delim('{') {
		return fmt.Errorf("got %v, want an object", tok)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("got %v, want an object key", tok)
		}
		if err := member(key); err != nil {
			return err
		}
	}
	_, err := dec.Token() // the closing brace
	return err
}

func convertProvider(address string, jp *jsonProvider) (*Provider, error) {
	p := &Provider{Address: address}
	var err error
	if jp.Provider != nil {
		if p.Schema, err = convertSchema(jp.Provider); err != nil {
			return nil, fmt.Errorf("provider config: %w", err)
		}
	} else {
		p.Schema = &tfprotov6.Schema{Block: &tfprotov6.SchemaBlock{}}
	}
	if p.Resources, err = convertSchemas(jp.ResourceSchemas); err != nil {
		return nil, err
	}
	if p.DataSources, err = convertSchemas(jp.DataSourceSchemas); err != nil {
		return nil, err
	}
	if p.EphemeralResources, err = convertSchemas(jp.EphemeralResourceSchemas); err != nil {
		return nil, err
	}
	p.Functions = make(map[string]*tfprotov6.Function, len(jp.Functions))
	for name, jf := range jp.Functions {
		fn, err := convertFunction(jf)
		if err != nil {
			return nil, fmt.Errorf("function %q: %w", name, err)
		}
		p.Functions[name] = fn
	}
	return p, nil
}

func convertSchemas(in map[string]*jsonSchema) (map[string]*tfprotov6.Schema, error) {
	out := make(map[string]*tfprotov6.Schema, len(in))
	for name, js := range in {
		s, err := convertSchema(js)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = s
	}
	return out, nil
}

func convertSchema(js *jsonSchema) (*tfprotov6.Schema, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: null schema", ErrInvalidSchema)
	}
	b, err := convertBlock(js.Block)
	if err != nil {
		return nil, err
	}
	b.Version = js.Version
	return &tfprotov6.Schema{Version: js.Version, Block: b}, nil
}

func convertBlock(jb *jsonBlock) (*tfprotov6.SchemaBlock, error) {
	b := &tfprotov6.SchemaBlock{}
	if jb == nil {
		return b, nil
	}
	b.Description = jb.Description
	b.DescriptionKind = descriptionKind(jb.DescriptionKind)
	b.Deprecated = jb.Deprecated
	attrs, err := convertAttributes(jb.Attributes)
	if err != nil {
		return nil, err
	}
	b.Attributes = attrs
	for _, name := range slices.Sorted(maps.Keys(jb.BlockTypes)) {
		jbt := jb.BlockTypes[name]
		mode, err := nesting(blockNestings, "block nesting mode", jbt.NestingMode)
		if err != nil {
			return nil, fmt.Errorf("block %q: %w", name, err)
		}
		inner, err := convertBlock(jbt.Block)
		if err != nil {
			return nil, fmt.Errorf("block %q: %w", name, err)
		}
		b.BlockTypes = append(b.BlockTypes, &tfprotov6.SchemaNestedBlock{
			TypeName: name,
			Block:    inner,
			Nesting:  mode,
			MinItems: jbt.MinItems,
			MaxItems: jbt.MaxItems,
		})
	}
	return b, nil
}

func convertAttributes(in map[string]*jsonAttribute) ([]*tfprotov6.SchemaAttribute, error) {
	out := make([]*tfprotov6.SchemaAttribute, 0, len(in))
	for _, name := range slices.Sorted(maps.Keys(in)) {
		ja := in[name]
		a := &tfprotov6.SchemaAttribute{
			Name:            name,
			Description:     ja.Description,
			DescriptionKind: descriptionKind(ja.DescriptionKind),
			Deprecated:      ja.Deprecated,
			Required:        ja.Required,
			Optional:        ja.Optional,
			Computed:        ja.Computed,
			Sensitive:       ja.Sensitive,
			WriteOnly:       ja.WriteOnly,
		}
		switch {
		case ja.NestedType != nil:
			mode, err := nesting(objectNestings, "nested attribute nesting mode", ja.NestedType.NestingMode)
			if err != nil {
				return nil, fmt.Errorf("attribute %q: %w", name, err)
			}
			nested, err := convertAttributes(ja.NestedType.Attributes)
			if err != nil {
				return nil, fmt.Errorf("attribute %q: %w", name, err)
			}
			a.NestedType = &tfprotov6.SchemaObject{Attributes: nested, Nesting: mode}
		case len(ja.Type) > 0:
			t, err := ParseType(ja.Type)
			if err != nil {
				return nil, fmt.Errorf("attribute %q: %w", name, err)
			}
			a.Type = t
		default:
			return nil, fmt.Errorf("%w: attribute %q has neither type nor nested_type", ErrInvalidSchema, name)
		}
		out = append(out, a)
	}
	return out, nil
}

func convertFunction(jf *jsonFunction) (*tfprotov6.Function, error) {
	ret, err := ParseType(jf.ReturnType)
	if err != nil {
		return nil, fmt.Errorf("return type: %w", err)
	}
	fn := &tfprotov6.Function{
		Summary:            jf.Summary,
		Description:        jf.Description,
		DescriptionKind:    tfprotov6.StringKindPlain,
		DeprecationMessage: jf.DeprecationMessage,
		Return:             &tfprotov6.FunctionReturn{Type: ret},
	}
	for _, jp := range jf.Parameters {
		p, err := convertParam(jp)
		if err != nil {
			return nil, err
		}
		fn.Parameters = append(fn.Parameters, p)
	}
	if jf.VariadicParameter != nil {
		if fn.VariadicParameter, err = convertParam(jf.VariadicParameter); err != nil {
			return nil, err
		}
	}
	return fn, nil
}

func convertParam(jp *jsonFunctionParam) (*tfprotov6.FunctionParameter, error) {
	t, err := ParseType(jp.Type)
	if err != nil {
		return nil, fmt.Errorf("parameter %q: %w", jp.Name, err)
	}
	return &tfprotov6.FunctionParameter{
		Name:               jp.Name,
		Description:        jp.Description,
		DescriptionKind:    descriptionKind(jp.DescriptionKind),
		Type:               t,
		AllowNullValue:     jp.AllowNullValue || jp.IsNullable,
		AllowUnknownValues: jp.AllowUnknownValues,
	}, nil
}

// ParseType converts a cty type in its JSON form ("string",
// ["list","number"], ["object",{"a":"bool"},["a"]], ["tuple",[...]],
// "dynamic") into a tftypes.Type.
func ParseType(raw json.RawMessage) (tftypes.Type, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: empty type", ErrInvalidSchema)
	}
	// Most attributes are of a primitive type: their exact spellings
	// without the JSON decoder (the plugin parses tens of thousands at
	// every start).
	switch string(raw) {
	case `"string"`:
		return tftypes.String, nil
	case `"number"`:
		return tftypes.Number, nil
	case `"bool"`:
		return tftypes.Bool, nil
	}
	if raw[0] == '"' {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return nil, fmt.Errorf("%w: type %s: %v", ErrInvalidSchema, raw, err)
		}
		switch name {
		case "string":
			return tftypes.String, nil
		case "number":
			return tftypes.Number, nil
		case "bool":
			return tftypes.Bool, nil
		case "dynamic":
			return tftypes.DynamicPseudoType, nil
		}
		return nil, fmt.Errorf("%w: unknown primitive type %q", ErrInvalidSchema, name)
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) < 2 {
		return nil, fmt.Errorf("%w: type %s is neither a name nor [kind, ...]", ErrInvalidSchema, raw)
	}
	var kind string
	if err := json.Unmarshal(parts[0], &kind); err != nil {
		return nil, fmt.Errorf("%w: type kind %s: %v", ErrInvalidSchema, parts[0], err)
	}
	switch kind {
	case "list", "set", "map":
		if len(parts) != 2 {
			return nil, fmt.Errorf("%w: %s type takes one element type: %s", ErrInvalidSchema, kind, raw)
		}
		elem, err := ParseType(parts[1])
		if err != nil {
			return nil, err
		}
		switch kind {
		case "list":
			return tftypes.List{ElementType: elem}, nil
		case "set":
			return tftypes.Set{ElementType: elem}, nil
		default:
			return tftypes.Map{ElementType: elem}, nil
		}
	case "object":
		if len(parts) > 3 {
			return nil, fmt.Errorf("%w: object type: %s", ErrInvalidSchema, raw)
		}
		var attrs map[string]json.RawMessage
		if err := json.Unmarshal(parts[1], &attrs); err != nil {
			return nil, fmt.Errorf("%w: object attributes %s: %v", ErrInvalidSchema, parts[1], err)
		}
		obj := tftypes.Object{AttributeTypes: make(map[string]tftypes.Type, len(attrs))}
		for name, at := range attrs {
			t, err := ParseType(at)
			if err != nil {
				return nil, fmt.Errorf("object attribute %q: %w", name, err)
			}
			obj.AttributeTypes[name] = t
		}
		if len(parts) == 3 {
			var optional []string
			if err := json.Unmarshal(parts[2], &optional); err != nil {
				return nil, fmt.Errorf("%w: object optional attributes %s: %v", ErrInvalidSchema, parts[2], err)
			}
			obj.OptionalAttributes = make(map[string]struct{}, len(optional))
			for _, name := range optional {
				if _, ok := obj.AttributeTypes[name]; !ok {
					return nil, fmt.Errorf("%w: optional attribute %q not in object", ErrInvalidSchema, name)
				}
				obj.OptionalAttributes[name] = struct{}{}
			}
		}
		return obj, nil
	case "tuple":
		if len(parts) != 2 {
			return nil, fmt.Errorf("%w: tuple type: %s", ErrInvalidSchema, raw)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(parts[1], &elems); err != nil {
			return nil, fmt.Errorf("%w: tuple elements %s: %v", ErrInvalidSchema, parts[1], err)
		}
		tup := tftypes.Tuple{ElementTypes: make([]tftypes.Type, 0, len(elems))}
		for i, et := range elems {
			t, err := ParseType(et)
			if err != nil {
				return nil, fmt.Errorf("tuple element %d: %w", i, err)
			}
			tup.ElementTypes = append(tup.ElementTypes, t)
		}
		return tup, nil
	}
	return nil, fmt.Errorf("%w: unknown type kind %q", ErrInvalidSchema, kind)
}

// The nesting modes of blocks and of nested attributes, by their JSON names.
var (
	blockNestings = map[string]tfprotov6.SchemaNestedBlockNestingMode{
		"single": tfprotov6.SchemaNestedBlockNestingModeSingle,
		"list":   tfprotov6.SchemaNestedBlockNestingModeList,
		"set":    tfprotov6.SchemaNestedBlockNestingModeSet,
		"map":    tfprotov6.SchemaNestedBlockNestingModeMap,
		"group":  tfprotov6.SchemaNestedBlockNestingModeGroup,
	}
	objectNestings = map[string]tfprotov6.SchemaObjectNestingMode{
		"single": tfprotov6.SchemaObjectNestingModeSingle,
		"list":   tfprotov6.SchemaObjectNestingModeList,
		"set":    tfprotov6.SchemaObjectNestingModeSet,
		"map":    tfprotov6.SchemaObjectNestingModeMap,
	}
)

// nesting looks a nesting mode up by its JSON name; an unknown one (the
// zero mode, Invalid) makes the schema invalid.
func nesting[M any](modes map[string]M, what, name string) (M, error) {
	m, ok := modes[name]
	if !ok {
		return m, fmt.Errorf("%w: %s %q", ErrInvalidSchema, what, name)
	}
	return m, nil
}

func descriptionKind(kind string) tfprotov6.StringKind {
	if kind == "markdown" {
		return tfprotov6.StringKindMarkdown
	}
	return tfprotov6.StringKindPlain
}
