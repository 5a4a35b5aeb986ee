package tfschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func TestParseType(t *testing.T) {
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
	for _, in := range []string{
		``, `"strin"`, `42`, `[]`, `["list"]`, `["list","string","number"]`, `["bag","string"]`,
		`["object",{"a":"nope"}]`, `["object",{"a":"string"},["b"]]`, `["tuple","string"]`, `{"type":"string"}`,
	} {
		if got, err := ParseType(json.RawMessage(in)); !errors.Is(err, ErrInvalidSchema) {
			t.Errorf("ParseType(%q) = %v, %v; want ErrInvalidSchema", in, got, err)
		}
	}
}

// fakeProvider is a provider written for these tests, not a copy of a real
// one (the real schemas are read where they lie, testenv.ProvidersSchema):
// it exercises every construct of the `providers schema -json` format,
// including nested attribute types that the google provider does not use.
const fakeProvider = `{
      "provider": {"version": 0, "block": {"attributes": {
        "endpoint": {"type": "string", "optional": true, "description_kind": "plain"},
        "token": {"type": "string", "optional": true, "sensitive": true, "description_kind": "plain"}}}},
      "resource_schemas": {
        "fake_thing": {"version": 2, "block": {
          "description": "A thing.", "description_kind": "markdown",
          "attributes": {
            "id": {"type": "string", "optional": true, "computed": true, "description_kind": "plain"},
            "name": {"type": "string", "required": true, "description_kind": "plain"},
            "old": {"type": "number", "optional": true, "deprecated": true, "description_kind": "plain"},
            "secret_wo": {"type": "string", "optional": true, "write_only": true, "description_kind": "plain"},
            "tags": {"type": ["map", "string"], "optional": true, "description_kind": "plain"},
            "endpoints": {"nested_type": {"nesting_mode": "list", "attributes": {
              "url": {"type": "string", "required": true, "description_kind": "plain"},
              "weight": {"type": "number", "optional": true, "computed": true, "description_kind": "plain"}}},
              "optional": true, "description_kind": "plain"},
            "owner": {"nested_type": {"nesting_mode": "single", "attributes": {
              "email": {"type": "string", "required": true, "description_kind": "plain"}}},
              "optional": true, "description_kind": "plain"}
          },
          "block_types": {
            "rule": {"nesting_mode": "list", "min_items": 1, "max_items": 3, "block": {
              "attributes": {
                "match": {"type": "string", "required": true, "description_kind": "plain"},
                "uid": {"type": "string", "computed": true, "description_kind": "plain"}},
              "block_types": {"limit": {"nesting_mode": "single", "block": {"attributes": {
                "max": {"type": "number", "optional": true, "description_kind": "plain"}}}}}}},
            "label": {"nesting_mode": "map", "block": {"attributes": {
              "value": {"type": "string", "optional": true, "description_kind": "plain"}}}},
            "tagset": {"nesting_mode": "set", "block": {"attributes": {
              "key": {"type": "string", "required": true, "description_kind": "plain"}}}},
            "timeouts": {"nesting_mode": "group", "block": {"attributes": {
              "create": {"type": "string", "optional": true, "description_kind": "plain"}}}}
          }}}
      },
      "data_source_schemas": {
        "fake_info": {"version": 0, "block": {"attributes": {
          "project": {"type": "string", "optional": true, "description_kind": "plain"},
          "number": {"type": "string", "computed": true, "description_kind": "plain"},
          "count": {"type": "number", "computed": true, "description_kind": "plain"},
          "enabled": {"type": "bool", "computed": true, "description_kind": "plain"},
          "zones": {"type": ["list", "string"], "computed": true, "description_kind": "plain"},
          "labels": {"type": ["map", "string"], "computed": true, "description_kind": "plain"},
          "shape": {"type": ["object", {"a": "string"}], "computed": true, "description_kind": "plain"}}}}
      },
      "ephemeral_resource_schemas": {
        "fake_token": {"version": 0, "block": {"attributes": {
          "value": {"type": "string", "computed": true, "sensitive": true, "description_kind": "plain"}}}}
      },
      "functions": {
        "project_from_id": {"summary": "project of an id", "return_type": "string",
          "parameters": [{"name": "id", "type": "string"}]},
        "join_all": {"return_type": "string", "parameters": [],
          "variadic_parameter": {"name": "parts", "type": "string", "is_nullable": true}}
      }
    }`

// fakeSchema is a schema document of fakeProvider and a second, empty
// provider, made as Terraform writes one (compact JSON).
var fakeSchema = func() string {
	b, err := json.Marshal(jsonDocument{FormatVersion: "1.0", ProviderSchemas: map[string]json.RawMessage{
		"registry.terraform.io/jsdlq/fake":  json.RawMessage(fakeProvider),
		"registry.terraform.io/jsdlq/other": json.RawMessage(`{"provider": {"version": 0, "block": {}}}`),
	}})
	if err != nil {
		panic(fmt.Sprintf("fakeSchema: %v", err))
	}
	return string(b)
}()

func loadFake(t *testing.T) *Provider {
	t.Helper()
	p, err := Load(strings.NewReader(fakeSchema), "registry.terraform.io/jsdlq/fake")
	if err != nil {
		t.Fatalf("Load(fake) error = %v", err)
	}
	return p
}

func TestLoadConvertsEveryConstruct(t *testing.T) {
	p := loadFake(t)

	if got := len(p.Schema.Block.Attributes); got != 2 {
		t.Errorf("provider attributes = %d, want 2", got)
	}
	r := p.Resources["fake_thing"]
	if r == nil {
		t.Fatalf("Resources[fake_thing] missing; have %v", slices.Sorted(maps.Keys(p.Resources)))
	}
	if r.Version != 2 || r.Block.DescriptionKind != tfprotov6.StringKindMarkdown {
		t.Errorf("fake_thing version/description kind = %d/%v, want 2/markdown", r.Version, r.Block.DescriptionKind)
	}

	attr := func(name string) *tfprotov6.SchemaAttribute {
		a := findAttribute(r.Block.Attributes, name)
		if a == nil {
			t.Fatalf("attribute %q missing", name)
		}
		return a
	}
	if a := attr("name"); !a.Required || a.Optional || a.Computed {
		t.Errorf("name flags = %+v, want required only", a)
	}
	if a := attr("id"); !a.Optional || !a.Computed {
		t.Errorf("id flags = %+v, want optional+computed", a)
	}
	if !attr("old").Deprecated || !attr("secret_wo").WriteOnly {
		t.Errorf("deprecated/write_only flags lost")
	}
	ep := attr("endpoints")
	if ep.Type != nil || ep.NestedType == nil || ep.NestedType.Nesting != tfprotov6.SchemaObjectNestingModeList {
		t.Fatalf("endpoints = %+v, want a list nested type", ep)
	}
	wantEP := tftypes.List{ElementType: tftypes.Object{AttributeTypes: map[string]tftypes.Type{"url": tftypes.String, "weight": tftypes.Number}}}
	if !ep.ValueType().Equal(wantEP) {
		t.Errorf("endpoints type = %s, want %s", ep.ValueType(), wantEP)
	}
	if attr("owner").NestedType.Nesting != tfprotov6.SchemaObjectNestingModeSingle {
		t.Errorf("owner nesting = %v, want single", attr("owner").NestedType.Nesting)
	}

	type blockShape struct {
		Nesting  tfprotov6.SchemaNestedBlockNestingMode
		Min, Max int64
	}
	got := map[string]blockShape{}
	for _, b := range r.Block.BlockTypes {
		got[b.TypeName] = blockShape{b.Nesting, b.MinItems, b.MaxItems}
	}
	want := map[string]blockShape{
		"rule":     {tfprotov6.SchemaNestedBlockNestingModeList, 1, 3},
		"label":    {tfprotov6.SchemaNestedBlockNestingModeMap, 0, 0},
		"tagset":   {tfprotov6.SchemaNestedBlockNestingModeSet, 0, 0},
		"timeouts": {tfprotov6.SchemaNestedBlockNestingModeGroup, 0, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("block shapes (-want +got):\n%s", diff)
	}
	if rule := findBlock(r.Block.BlockTypes, "rule"); findBlock(rule.Block.BlockTypes, "limit").Nesting != tfprotov6.SchemaNestedBlockNestingModeSingle {
		t.Errorf("rule.limit nesting is not single")
	}

	if p.DataSources["fake_info"] == nil || p.EphemeralResources["fake_token"] == nil {
		t.Errorf("data source or ephemeral resource missing")
	}
	fn := p.Functions["join_all"]
	if fn == nil || fn.VariadicParameter == nil || !fn.VariadicParameter.AllowNullValue || !fn.Return.Type.Is(tftypes.String) {
		t.Errorf("join_all = %+v, want a nullable variadic string function returning string", fn)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(strings.NewReader(fakeSchema), "registry.terraform.io/hashicorp/google"); !errors.Is(err, ErrProviderNotFound) {
		t.Errorf("Load(absent provider) error = %v, want ErrProviderNotFound", err)
	}
	if _, err := Load(strings.NewReader(fakeSchema[:len(fakeSchema)/2]), "x"); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("Load(truncated) error = %v, want ErrInvalidSchema", err)
	}
	bad := strings.Replace(fakeSchema, `"nesting_mode":"map"`, `"nesting_mode":"bag"`, 1)
	if _, err := Load(strings.NewReader(bad), "registry.terraform.io/jsdlq/fake"); !errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), "bag") {
		t.Errorf("Load(bad nesting mode) error = %v, want ErrInvalidSchema naming \"bag\"", err)
	}
	untyped := strings.Replace(fakeSchema, `"match":{"type":"string",`, `"match":{`, 1)
	if _, err := Load(strings.NewReader(untyped), "registry.terraform.io/jsdlq/fake"); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("Load(attribute without type) error = %v, want ErrInvalidSchema", err)
	}
}

func TestPlanValue(t *testing.T) {
	p := loadFake(t)
	sc := p.Resources["fake_thing"]
	typ := sc.ValueType().(tftypes.Object)

	str := func(s string) tftypes.Value { return tftypes.NewValue(tftypes.String, s) }
	null := func(t tftypes.Type) tftypes.Value { return tftypes.NewValue(t, nil) }
	ruleType := typ.AttributeTypes["rule"].(tftypes.List).ElementType.(tftypes.Object)
	epType := typ.AttributeTypes["endpoints"].(tftypes.List).ElementType.(tftypes.Object)

	vals := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		vals[name] = null(at)
	}
	vals["name"] = str("n")
	vals["secret_wo"] = str("hunter2")
	vals["endpoints"] = tftypes.NewValue(typ.AttributeTypes["endpoints"], []tftypes.Value{
		tftypes.NewValue(epType, map[string]tftypes.Value{"url": str("https://x"), "weight": null(tftypes.Number)}),
	})
	vals["rule"] = tftypes.NewValue(typ.AttributeTypes["rule"], []tftypes.Value{
		tftypes.NewValue(ruleType, map[string]tftypes.Value{"match": str("m"), "uid": null(tftypes.String), "limit": null(ruleType.AttributeTypes["limit"])}),
	})
	proposed := tftypes.NewValue(typ, vals)

	for _, create := range []bool{true, false} {
		planned, err := PlanValue(sc.Block, proposed, create)
		if err != nil {
			t.Fatalf("PlanValue(create=%v) error = %v", create, err)
		}
		check := func(path *tftypes.AttributePath, wantUnknown, wantNull bool) {
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
		// Computed and unset: unknown on create, left alone on update.
		check(tftypes.NewAttributePath().WithAttributeName("id"), create, !create)
		check(tftypes.NewAttributePath().WithAttributeName("rule").WithElementKeyInt(0).WithAttributeName("uid"), create, !create)
		check(tftypes.NewAttributePath().WithAttributeName("endpoints").WithElementKeyInt(0).WithAttributeName("weight"), create, !create)
		// Configured values stay; write-only values are never planned;
		// optional non-computed nulls stay null.
		check(tftypes.NewAttributePath().WithAttributeName("name"), false, false)
		check(tftypes.NewAttributePath().WithAttributeName("secret_wo"), false, true)
		check(tftypes.NewAttributePath().WithAttributeName("tags"), false, true)
		check(tftypes.NewAttributePath().WithAttributeName("rule").WithElementKeyInt(0).WithAttributeName("match"), false, false)
	}
}

func TestPlaceholderValue(t *testing.T) {
	p := loadFake(t)
	sc := p.DataSources["fake_info"]
	typ := sc.ValueType().(tftypes.Object)
	vals := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		vals[name] = tftypes.NewValue(at, nil)
	}
	vals["project"] = tftypes.NewValue(tftypes.String, "p1")

	got, err := PlaceholderValue(sc.Block, tftypes.NewValue(typ, vals))
	if err != nil {
		t.Fatalf("PlaceholderValue error = %v", err)
	}
	var attrs map[string]tftypes.Value
	if err := got.As(&attrs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"project": `tftypes.String<"p1">`,
		"number":  `tftypes.String<"` + Placeholder + `">`,
		"count":   `tftypes.Number<"0">`,
		"enabled": `tftypes.Bool<"false">`,
		"zones":   `tftypes.List[tftypes.String]<>`,
		"labels":  `tftypes.Map[tftypes.String]<>`,
		"shape":   `tftypes.Object["a":tftypes.String]<null>`,
	}
	gotStr := map[string]string{}
	for k, v := range attrs {
		gotStr[k] = v.String()
	}
	if diff := cmp.Diff(want, gotStr); diff != "" {
		t.Errorf("PlaceholderValue (-want +got):\n%s", diff)
	}
	if !got.IsFullyKnown() {
		t.Errorf("PlaceholderValue = %s, want wholly known", got)
	}
}

func TestCallFunction(t *testing.T) {
	p := loadFake(t)
	// The google functions are looked up by name; give the fake provider
	// the same signatures so the server path (decode, call, encode) runs.
	for name := range idSegments {
		p.Functions[name] = p.Functions["project_from_id"]
	}
	p.Functions["name_from_id"] = p.Functions["project_from_id"]
	p.Functions["region_from_zone"] = p.Functions["project_from_id"]
	s := NewServer(p)

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
	p := loadFake(t)
	s := NewServer(p)
	typ := p.Resources["fake_thing"].ValueType().(tftypes.Object)
	ruleType := typ.AttributeTypes["rule"].(tftypes.List).ElementType.(tftypes.Object)

	config := func(uid tftypes.Value, id tftypes.Value) *tfprotov6.DynamicValue {
		vals := map[string]tftypes.Value{}
		for name, at := range typ.AttributeTypes {
			vals[name] = tftypes.NewValue(at, nil)
		}
		vals["name"] = tftypes.NewValue(tftypes.String, "n")
		vals["id"] = id
		vals["rule"] = tftypes.NewValue(typ.AttributeTypes["rule"], []tftypes.Value{
			tftypes.NewValue(ruleType, map[string]tftypes.Value{
				"match": tftypes.NewValue(tftypes.String, "m"),
				"uid":   uid,
				"limit": tftypes.NewValue(ruleType.AttributeTypes["limit"], nil),
			}),
		})
		dv, err := tfprotov6.NewDynamicValue(typ, tftypes.NewValue(typ, vals))
		if err != nil {
			t.Fatal(err)
		}
		return &dv
	}
	null := tftypes.NewValue(tftypes.String, nil)

	tests := []struct {
		name     string
		config   *tfprotov6.DynamicValue
		wantPath string
	}{
		{"unset computed-only and set optional+computed pass", config(null, tftypes.NewValue(tftypes.String, "my-id")), ""},
		{"computed-only set to a literal fails", config(tftypes.NewValue(tftypes.String, "x"), null), `AttributeName("rule").ElementKeyInt(0).AttributeName("uid")`},
		{"computed-only set to an unknown value fails too", config(tftypes.NewValue(tftypes.String, tftypes.UnknownValue), null), `AttributeName("rule").ElementKeyInt(0).AttributeName("uid")`},
	}
	for _, tt := range tests {
		resp, err := s.ValidateResourceConfig(t.Context(), &tfprotov6.ValidateResourceConfigRequest{TypeName: "fake_thing", Config: tt.config})
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
	s := NewServer(loadFake(t))
	resp, err := s.UpgradeResourceState(t.Context(), &tfprotov6.UpgradeResourceStateRequest{
		TypeName: "fake_thing",
		Version:  1,
		RawState: &tfprotov6.RawState{JSON: []byte(`{"id":"a1","name":"n","removed_in_v2":"x","rule":[{"match":"m","uid":"u","limit":null}]}`)},
	})
	if err != nil || len(resp.Diagnostics) > 0 {
		t.Fatalf("UpgradeResourceState = %v, %v", resp.Diagnostics, err)
	}
	v, err := resp.UpgradedState.Unmarshal(loadFake(t).Resources["fake_thing"].ValueType())
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]tftypes.Value
	if err := v.As(&attrs); err != nil {
		t.Fatal(err)
	}
	var id, name string
	if attrs["id"].As(&id) != nil || attrs["name"].As(&name) != nil || id != "a1" || name != "n" {
		t.Errorf("UpgradeResourceState kept id=%q name=%q, want a1/n", id, name)
	}
	if _, ok := attrs["removed_in_v2"]; ok {
		t.Errorf("UpgradeResourceState kept an attribute the schema no longer has")
	}

	resp, err = s.UpgradeResourceState(t.Context(), &tfprotov6.UpgradeResourceStateRequest{TypeName: "no_such_thing", RawState: &tfprotov6.RawState{JSON: []byte(`{}`)}})
	if err != nil || len(resp.Diagnostics) != 1 {
		t.Errorf("UpgradeResourceState(unknown type) = %v, %v; want one diagnostic", resp.Diagnostics, err)
	}
}
