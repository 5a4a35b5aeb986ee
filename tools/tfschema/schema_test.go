package tfschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

func TestParseType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want tftypes.Type
	}{
		{`"string"`, tftypes.String},
		{`"number"`, tftypes.Number},
		{`"bool"`, tftypes.Bool},
		{`"dynamic"`, tftypes.DynamicPseudoType},
		{`["list","string"]`, tftypes.List{ElementType: tftypes.String}},
		{`["set",["map","number"]]`, tftypes.Set{ElementType: tftypes.Map{ElementType: tftypes.Number}}},
		{`["object",{"a":"string","b":["list","bool"]}]`, tftypes.Object{AttributeTypes: map[string]tftypes.Type{"a": tftypes.String, "b": tftypes.List{ElementType: tftypes.Bool}}}},
		{`["object",{"a":"string","b":"number"},["b"]]`, tftypes.Object{AttributeTypes: map[string]tftypes.Type{"a": tftypes.String, "b": tftypes.Number}, OptionalAttributes: map[string]struct{}{"b": {}}}},
		{`["tuple",["string","number"]]`, tftypes.Tuple{ElementTypes: []tftypes.Type{tftypes.String, tftypes.Number}}},
	}
	for _, tt := range tests {
		got, err := ParseType(json.RawMessage(tt.in))
		if err != nil {
			t.Errorf("ParseType(%s) error = %v", tt.in, err)
			continue
		}
		if !got.Equal(tt.want) {
			t.Errorf("ParseType(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestParseTypeRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		``, `"strin"`, `42`, `[]`, `["list"]`, `["list","string","number"]`, `["bag","string"]`,
		`["object",{"a":"nope"}]`, `["object",{"a":"string"},["b"]]`, `["tuple","string"]`, `{"type":"string"}`,
	} {
		if got, err := ParseType(json.RawMessage(in)); !errors.Is(err, ErrInvalidSchema) {
			t.Errorf("ParseType(%q) = %v, %v; want ErrInvalidSchema", in, got, err)
		}
	}
}

// google is the provider whose real schema the tests read.
const google = "registry.terraform.io/hashicorp/google"

// realSchema is the providers schema document in ../shared/terraform
// (testenv.ProvidersSchema; the tests skip, saying so, without it), read
// once: no schema is committed with the tests.
func realSchema(t *testing.T) []byte {
	t.Helper()
	path := testenv.ProvidersSchema(t)
	realDoc.once.Do(func() { realDoc.b, realDoc.err = os.ReadFile(path) })
	if realDoc.err != nil {
		t.Fatalf("read %s: %v", path, realDoc.err)
	}
	return realDoc.b
}

var realDoc struct {
	once sync.Once
	b    []byte
	err  error
}

// edited is the real document with the google provider's schema (decoded
// as plain JSON) changed by edit.
func edited(t *testing.T, edit func(g jsonObject)) []byte {
	t.Helper()
	var doc jsonObject
	if err := json.Unmarshal(realSchema(t), &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc.obj("provider_schemas").obj(google))
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonObject is a decoded JSON object, walked by key.
type jsonObject map[string]any

func (o jsonObject) obj(key string) jsonObject { return o[key].(map[string]any) }

// block is resource (or data source) name's block in provider g.
func block(g jsonObject, kind, name string) jsonObject {
	return g.obj(kind).obj(name).obj("block")
}

// everyConstruct makes, from the google provider's own blocks and
// functions, the constructs of the format that it does not use: nested
// attribute types (list and single), map and group blocks, an object-typed
// computed attribute and a variadic function.
func everyConstruct(g jsonObject) {
	q := block(g, "resource_schemas", "google_cloud_tasks_queue")
	attrs, blocks := q.obj("attributes"), q.obj("block_types")
	for name, mode := range map[string]string{"retry_config": "list", "stackdriver_logging_config": "single"} {
		attrs[name] = map[string]any{"nested_type": map[string]any{"nesting_mode": mode, "attributes": blocks.obj(name).obj("block")["attributes"]},
			"optional": true, "description_kind": "plain"}
		delete(blocks, name)
	}
	routing := blocks.obj("app_engine_routing_override")
	routing["nesting_mode"] = "map"
	delete(routing, "max_items")
	blocks.obj("timeouts")["nesting_mode"] = "group"

	versioning := block(g, "data_source_schemas", "google_storage_bucket").obj("attributes").obj("versioning")
	versioning["type"] = versioning["type"].([]any)[1] // list(object) -> its object

	join := maps.Clone(g.obj("functions").obj("project_from_id"))
	param := maps.Clone(join["parameters"].([]any)[0].(map[string]any))
	param["is_nullable"] = true
	join["parameters"], join["variadic_parameter"] = []any{}, param
	g.obj("functions")["join_all"] = join
}

func loadDoc(t *testing.T, doc []byte) *Provider {
	t.Helper()
	p, err := Load(bytes.NewReader(doc), google)
	if err != nil {
		t.Fatalf("Load(google) error = %v", err)
	}
	return p
}

// TestLoadConvertsTheRealSchema: every resource, data source and ephemeral
// resource of the google provider converts with its version, its
// attributes' types and flags and its blocks' nesting and bounds.
func TestLoadConvertsTheRealSchema(t *testing.T) {
	t.Parallel()
	raw := realSchema(t)
	p := loadDoc(t, raw)
	var doc struct {
		ProviderSchemas map[string]struct {
			Provider  rawSchema            `json:"provider"`
			Resources map[string]rawSchema `json:"resource_schemas"`
			Data      map[string]rawSchema `json:"data_source_schemas"`
			Ephemeral map[string]rawSchema `json:"ephemeral_resource_schemas"`
			Functions map[string]struct {
				Parameters []struct{ Name string } `json:"parameters"`
			} `json:"functions"`
		} `json:"provider_schemas"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	g := doc.ProviderSchemas[google]
	checkBlock(t, "provider", g.Provider.Block, p.Schema.Block)
	for kind, pair := range map[string]struct {
		raw  map[string]rawSchema
		conv map[string]*tfprotov6.Schema
	}{"resource": {g.Resources, p.Resources}, "data source": {g.Data, p.DataSources}, "ephemeral resource": {g.Ephemeral, p.EphemeralResources}} {
		if len(pair.raw) == 0 || len(pair.conv) != len(pair.raw) {
			t.Errorf("%ss: %d converted, want all %d", kind, len(pair.conv), len(pair.raw))
		}
		for name, r := range pair.raw {
			c := pair.conv[name]
			if c == nil || c.Version != r.Version {
				t.Errorf("%s %s = %+v, want version %d", kind, name, c, r.Version)
				continue
			}
			checkBlock(t, name, r.Block, c.Block)
		}
	}
	for name, f := range g.Functions {
		c := p.Functions[name]
		if c == nil || len(c.Parameters) != len(f.Parameters) || c.Parameters[0].Name != f.Parameters[0].Name {
			t.Errorf("function %s = %+v, want parameters %v", name, c, f.Parameters)
		}
	}
}

// rawSchema and rawBlock are the schema format as the document has it.
type rawSchema struct {
	Version int64    `json:"version"`
	Block   rawBlock `json:"block"`
}

type rawBlock struct {
	DescriptionKind string `json:"description_kind"`
	Attributes      map[string]struct {
		Type                                                json.RawMessage `json:"type"`
		Required, Optional, Computed, Sensitive, Deprecated bool
		WriteOnly                                           bool `json:"write_only"`
	} `json:"attributes"`
	BlockTypes map[string]struct {
		NestingMode string   `json:"nesting_mode"`
		MinItems    int64    `json:"min_items"`
		MaxItems    int64    `json:"max_items"`
		Block       rawBlock `json:"block"`
	} `json:"block_types"`
}

func checkBlock(t *testing.T, path string, raw rawBlock, b *tfprotov6.SchemaBlock) {
	t.Helper()
	if len(b.Attributes) != len(raw.Attributes) || len(b.BlockTypes) != len(raw.BlockTypes) {
		t.Errorf("%s: %d attributes and %d blocks, want %d and %d", path, len(b.Attributes), len(b.BlockTypes), len(raw.Attributes), len(raw.BlockTypes))
		return
	}
	if (raw.DescriptionKind == "markdown") != (b.DescriptionKind == tfprotov6.StringKindMarkdown) {
		t.Errorf("%s: description kind %v, want %s", path, b.DescriptionKind, raw.DescriptionKind)
	}
	for name, ra := range raw.Attributes {
		a := findAttribute(b.Attributes, name)
		want, err := ParseType(ra.Type)
		if a == nil || err != nil || !a.Type.Equal(want) {
			t.Errorf("%s.%s = %+v (%v), want type %s", path, name, a, err, ra.Type)
			continue
		}
		got := [6]bool{a.Required, a.Optional, a.Computed, a.Sensitive, a.Deprecated, a.WriteOnly}
		if want := [6]bool{ra.Required, ra.Optional, ra.Computed, ra.Sensitive, ra.Deprecated, ra.WriteOnly}; got != want {
			t.Errorf("%s.%s flags (required, optional, computed, sensitive, deprecated, write-only) = %v, want %v", path, name, got, want)
		}
	}
	modes := map[string]tfprotov6.SchemaNestedBlockNestingMode{"single": tfprotov6.SchemaNestedBlockNestingModeSingle,
		"list": tfprotov6.SchemaNestedBlockNestingModeList, "set": tfprotov6.SchemaNestedBlockNestingModeSet}
	for name, rb := range raw.BlockTypes {
		nb := findBlock(b.BlockTypes, name)
		if nb == nil || nb.Nesting != modes[rb.NestingMode] || nb.MinItems != rb.MinItems || nb.MaxItems != rb.MaxItems {
			t.Errorf("%s block %s = %+v, want %s, %d to %d", path, name, nb, rb.NestingMode, rb.MinItems, rb.MaxItems)
			continue
		}
		checkBlock(t, path+"."+name, rb.Block, nb.Block)
	}
}

// TestLoadConvertsWhatGoogleDoesNotUse: the constructs the google provider
// does not use, made from its own blocks (everyConstruct), convert too.
func TestLoadConvertsWhatGoogleDoesNotUse(t *testing.T) {
	t.Parallel()
	p := loadDoc(t, edited(t, everyConstruct))
	q := p.Resources["google_cloud_tasks_queue"].Block

	retry := findAttribute(q.Attributes, "retry_config")
	if retry == nil || retry.Type != nil || retry.NestedType == nil || retry.NestedType.Nesting != tfprotov6.SchemaObjectNestingModeList {
		t.Fatalf("retry_config = %+v, want a list nested type", retry)
	}
	elem, ok := retry.ValueType().(tftypes.List).ElementType.(tftypes.Object)
	if !ok || len(elem.AttributeTypes) != 5 || !elem.AttributeTypes["max_attempts"].Is(tftypes.Number) {
		t.Errorf("retry_config type = %s, want a list of its 5 attributes", retry.ValueType())
	}
	if a := findAttribute(q.Attributes, "stackdriver_logging_config"); a == nil || a.NestedType.Nesting != tfprotov6.SchemaObjectNestingModeSingle {
		t.Errorf("stackdriver_logging_config = %+v, want a single nested type", a)
	}
	for name, want := range map[string]tfprotov6.SchemaNestedBlockNestingMode{
		"app_engine_routing_override": tfprotov6.SchemaNestedBlockNestingModeMap,
		"timeouts":                    tfprotov6.SchemaNestedBlockNestingModeGroup,
		"rate_limits":                 tfprotov6.SchemaNestedBlockNestingModeList,
	} {
		if b := findBlock(q.BlockTypes, name); b == nil || b.Nesting != want {
			t.Errorf("block %s = %+v, want nesting %v", name, b, want)
		}
	}
	v := findAttribute(p.DataSources["google_storage_bucket"].Block.Attributes, "versioning")
	if _, ok := v.Type.(tftypes.Object); !ok {
		t.Errorf("versioning type = %s, want an object", v.Type)
	}
	fn := p.Functions["join_all"]
	if fn == nil || fn.VariadicParameter == nil || !fn.VariadicParameter.AllowNullValue || !fn.Return.Type.Is(tftypes.String) {
		t.Errorf("join_all = %+v, want a nullable variadic string function returning string", fn)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	raw := realSchema(t)
	if _, err := Load(bytes.NewReader(raw), "registry.terraform.io/jsdlq/none"); !errors.Is(err, ErrProviderNotFound) {
		t.Errorf("Load(absent provider) error = %v, want ErrProviderNotFound", err)
	}
	if _, err := Load(bytes.NewReader(raw[:len(raw)/2]), google); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("Load(truncated) error = %v, want ErrInvalidSchema", err)
	}
	bad := edited(t, func(g jsonObject) {
		block(g, "resource_schemas", "google_cloud_tasks_queue").obj("block_types").obj("retry_config")["nesting_mode"] = "bag"
	})
	if _, err := Load(bytes.NewReader(bad), google); !errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), "bag") {
		t.Errorf("Load(bad nesting mode) error = %v, want ErrInvalidSchema naming \"bag\"", err)
	}
	untyped := edited(t, func(g jsonObject) {
		delete(block(g, "resource_schemas", "google_cloud_tasks_queue").obj("attributes").obj("name"), "type")
	})
	if _, err := Load(bytes.NewReader(untyped), google); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("Load(attribute without type) error = %v, want ErrInvalidSchema", err)
	}
}

// objectValue is a value of typ whose attributes are null but for set.
func objectValue(typ tftypes.Object, set map[string]tftypes.Value) tftypes.Value {
	vals := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		vals[name] = tftypes.NewValue(at, nil)
	}
	maps.Copy(vals, set)
	return tftypes.NewValue(typ, vals)
}

// listOf is a list of typ holding one object of its element type, null but
// for set.
func listOf(typ tftypes.Type, set map[string]tftypes.Value) tftypes.Value {
	return tftypes.NewValue(typ, []tftypes.Value{objectValue(typ.(tftypes.List).ElementType.(tftypes.Object), set)})
}

func TestPlanValue(t *testing.T) {
	t.Parallel()
	p := loadDoc(t, edited(t, everyConstruct))
	str := func(s string) tftypes.Value { return tftypes.NewValue(tftypes.String, s) }

	queue := p.Resources["google_cloud_tasks_queue"]
	qt := queue.ValueType().(tftypes.Object)
	proposedQueue := objectValue(qt, map[string]tftypes.Value{
		"name": str("q"), "location": str("l"),
		"retry_config": listOf(qt.AttributeTypes["retry_config"], nil),
		"rate_limits":  listOf(qt.AttributeTypes["rate_limits"], nil),
	})
	secret := p.Resources["google_secret_manager_secret_version"]
	proposedSecret := objectValue(secret.ValueType().(tftypes.Object), map[string]tftypes.Value{"secret": str("s"), "secret_data_wo": str("hunter2")})

	for _, create := range []bool{true, false} {
		plan := func(sc *tfprotov6.Schema, proposed tftypes.Value) func(*tftypes.AttributePath, bool, bool) {
			planned, err := PlanValue(sc.Block, proposed, create)
			if err != nil {
				t.Fatalf("PlanValue(create=%v) error = %v", create, err)
			}
			return func(path *tftypes.AttributePath, wantUnknown, wantNull bool) {
				t.Helper()
				got, _, err := tftypes.WalkAttributePath(planned, path)
				if err != nil {
					t.Fatalf("create=%v: walk %s: %v", create, path, err)
				}
				v := got.(tftypes.Value)
				if v.IsKnown() == wantUnknown || (v.IsKnown() && v.IsNull() != wantNull) {
					t.Errorf("PlanValue(create=%v) at %s = %s, want unknown=%v null=%v", create, path, v, wantUnknown, wantNull)
				}
			}
		}
		check := plan(queue, proposedQueue)
		// Computed and unset: unknown on create, left alone on update, at
		// the top, in a block and in a nested attribute.
		check(tftypes.NewAttributePath().WithAttributeName("id"), create, !create)
		check(tftypes.NewAttributePath().WithAttributeName("rate_limits").WithElementKeyInt(0).WithAttributeName("max_burst_size"), create, !create)
		check(tftypes.NewAttributePath().WithAttributeName("retry_config").WithElementKeyInt(0).WithAttributeName("max_attempts"), create, !create)
		// Configured values stay; optional non-computed nulls stay null.
		check(tftypes.NewAttributePath().WithAttributeName("name"), false, false)
		check(tftypes.NewAttributePath().WithAttributeName("desired_state"), false, true)
		// Write-only values are never planned.
		plan(secret, proposedSecret)(tftypes.NewAttributePath().WithAttributeName("secret_data_wo"), false, true)
	}
}

func TestPlaceholderValue(t *testing.T) {
	t.Parallel()
	p := loadDoc(t, edited(t, everyConstruct))
	sc := p.DataSources["google_storage_bucket"]
	config := objectValue(sc.ValueType().(tftypes.Object), map[string]tftypes.Value{
		"name": tftypes.NewValue(tftypes.String, "b"), "project": tftypes.NewValue(tftypes.String, "p1")})

	got, err := PlaceholderValue(sc.Block, config)
	if err != nil {
		t.Fatalf("PlaceholderValue error = %v", err)
	}
	var attrs map[string]tftypes.Value
	if err := got.As(&attrs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"name":           `tftypes.String<"b">`,
		"project":        `tftypes.String<"p1">`,
		"url":            `tftypes.String<"` + Placeholder + `">`,
		"project_number": `tftypes.Number<"0">`,
		"requester_pays": `tftypes.Bool<"false">`,
		"labels":         `tftypes.Map[tftypes.String]<>`,
		"cors":           attrs["cors"].Type().String() + `<>`,
		"versioning":     `tftypes.Object["enabled":tftypes.Bool]<null>`,
	}
	gotStr := map[string]string{}
	for k := range want {
		gotStr[k] = attrs[k].String()
	}
	if diff := cmp.Diff(want, gotStr); diff != "" {
		t.Errorf("PlaceholderValue (-want +got):\n%s", diff)
	}
	if !got.IsFullyKnown() {
		t.Errorf("PlaceholderValue = %s, want wholly known", got)
	}
}

func TestCallFunction(t *testing.T) {
	t.Parallel()
	s := NewServer(loadDoc(t, edited(t, everyConstruct)))
	tests := []struct {
		name, arg, want string
		wantErr         bool
	}{
		{"project_from_id", "projects/p1/locations/europe-west1/services/s", "p1", false},
		{"location_from_id", "https://run.googleapis.com/v2/projects/p1/locations/europe-west1/services/s", "europe-west1", false},
		{"region_from_id", "projects/p1/regions/us-east1/subnetworks/n", "us-east1", false},
		{"zone_from_id", "projects/p1/zones/us-east1-b/instances/i", "us-east1-b", false},
		{"name_from_id", "projects/p1/topics/dlq-events", "dlq-events", false},
		{"region_from_zone", "europe-west1-b", "europe-west1", false},
		{"location_from_id", "projects/p1/topics/t", "", true},
		{"region_from_zone", "nozone", "", true},
		{"no_such_function", "x", "", true},
	}
	for _, tt := range tests {
		arg, err := tfprotov6.NewDynamicValue(tftypes.String, tftypes.NewValue(tftypes.String, tt.arg))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.CallFunction(t.Context(), &tfprotov6.CallFunctionRequest{Name: tt.name, Arguments: []*tfprotov6.DynamicValue{&arg}})
		if err != nil {
			t.Fatalf("CallFunction(%s) transport error = %v", tt.name, err)
		}
		if tt.wantErr {
			if resp.Error == nil {
				t.Errorf("CallFunction(%s, %q) = %v, want a function error", tt.name, tt.arg, resp.Result)
			}
			continue
		}
		if resp.Error != nil {
			t.Errorf("CallFunction(%s, %q) error = %s", tt.name, tt.arg, resp.Error.Text)
			continue
		}
		v, err := resp.Result.Unmarshal(tftypes.String)
		var got string
		if err != nil || v.As(&got) != nil || got != tt.want {
			t.Errorf("CallFunction(%s, %q) = %s, want %q", tt.name, tt.arg, v, tt.want)
		}
	}

	// In the schema but not emulated: an error, never a made-up value.
	variadic, _ := tfprotov6.NewDynamicValue(tftypes.List{ElementType: tftypes.String}, tftypes.NewValue(tftypes.List{ElementType: tftypes.String}, []tftypes.Value{tftypes.NewValue(tftypes.String, "a")}))
	resp, err := s.CallFunction(t.Context(), &tfprotov6.CallFunctionRequest{Name: "join_all", Arguments: []*tfprotov6.DynamicValue{&variadic}})
	if err != nil || resp.Error == nil || !strings.Contains(resp.Error.Text, "not emulated") {
		t.Errorf("CallFunction(join_all) = %+v, %v; want a \"not emulated\" function error", resp, err)
	}
}

func TestValidateRejectsComputedOnly(t *testing.T) {
	t.Parallel()
	p := loadDoc(t, realSchema(t))
	s := NewServer(p)
	typ := p.Resources["google_cloud_tasks_queue"].ValueType().(tftypes.Object)
	config := func(burst, id tftypes.Value) *tfprotov6.DynamicValue {
		v := objectValue(typ, map[string]tftypes.Value{
			"name": tftypes.NewValue(tftypes.String, "q"), "location": tftypes.NewValue(tftypes.String, "l"), "id": id,
			"rate_limits": listOf(typ.AttributeTypes["rate_limits"], map[string]tftypes.Value{"max_burst_size": burst}),
		})
		dv, err := tfprotov6.NewDynamicValue(typ, v)
		if err != nil {
			t.Fatal(err)
		}
		return &dv
	}
	null := tftypes.NewValue(tftypes.Number, nil)
	const burstPath = `AttributeName("rate_limits").ElementKeyInt(0).AttributeName("max_burst_size")`

	tests := []struct {
		name     string
		config   *tfprotov6.DynamicValue
		wantPath string
	}{
		{"unset computed-only and set optional+computed pass", config(null, tftypes.NewValue(tftypes.String, "my-id")), ""},
		{"computed-only set to a literal fails", config(tftypes.NewValue(tftypes.Number, 5), tftypes.NewValue(tftypes.String, nil)), burstPath},
		{"computed-only set to an unknown value fails too", config(tftypes.NewValue(tftypes.Number, tftypes.UnknownValue), tftypes.NewValue(tftypes.String, nil)), burstPath},
	}
	for _, tt := range tests {
		resp, err := s.ValidateResourceConfig(t.Context(), &tfprotov6.ValidateResourceConfigRequest{TypeName: "google_cloud_tasks_queue", Config: tt.config})
		if err != nil {
			t.Fatalf("%s: ValidateResourceConfig error = %v", tt.name, err)
		}
		var got string
		if len(resp.Diagnostics) > 0 {
			got = resp.Diagnostics[0].Attribute.String()
		}
		if len(resp.Diagnostics) > 1 || got != tt.wantPath {
			t.Errorf("%s: ValidateResourceConfig diagnostics at %q (%d), want at %q", tt.name, got, len(resp.Diagnostics), tt.wantPath)
		}
	}
}

func TestUpgradeResourceStateDropsUnknownAttributes(t *testing.T) {
	t.Parallel()
	p := loadDoc(t, realSchema(t))
	s := NewServer(p)
	const typ = "google_secret_manager_secret_version" // schema version 1
	resp, err := s.UpgradeResourceState(t.Context(), &tfprotov6.UpgradeResourceStateRequest{
		TypeName: typ,
		Version:  0,
		RawState: &tfprotov6.RawState{JSON: []byte(`{"id":"a1","secret":"s","removed_in_v1":"x","timeouts":null}`)},
	})
	if err != nil || len(resp.Diagnostics) > 0 {
		t.Fatalf("UpgradeResourceState = %v, %v", resp.Diagnostics, err)
	}
	v, err := resp.UpgradedState.Unmarshal(p.Resources[typ].ValueType())
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]tftypes.Value
	if err := v.As(&attrs); err != nil {
		t.Fatal(err)
	}
	var id, secret string
	if attrs["id"].As(&id) != nil || attrs["secret"].As(&secret) != nil || id != "a1" || secret != "s" {
		t.Errorf("UpgradeResourceState kept id=%q secret=%q, want a1/s", id, secret)
	}
	if _, ok := attrs["removed_in_v1"]; ok {
		t.Errorf("UpgradeResourceState kept an attribute the schema no longer has")
	}

	resp, err = s.UpgradeResourceState(t.Context(), &tfprotov6.UpgradeResourceStateRequest{TypeName: "no_such_thing", RawState: &tfprotov6.RawState{JSON: []byte(`{}`)}})
	if err != nil || len(resp.Diagnostics) != 1 {
		t.Errorf("UpgradeResourceState(unknown type) = %v, %v; want one diagnostic", resp.Diagnostics, err)
	}
}
