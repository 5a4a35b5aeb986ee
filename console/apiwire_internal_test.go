package console

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/reconciler"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Who acted becomes a role, the stored one when the API knows it; the
// actor names other packages write are pinned against their sources.
func TestActorRole(t *testing.T) {
	// As history holds a tenant key's actions (tenantCall.actor).
	tenantKey := "tenant-api:acme:key-0123456789abcdef"
	for _, tt := range []struct{ stored, by, want string }{
		{"", tenantKey, roleTenant},
		{"", agentkit.TriageActor("ceo"), roleTriageAgent},
		{"", "classify", roleSystem},
		{"", replay.By, roleSystem},
		{"", reconciler.By, roleSystem},
		{"", store.ByReconcile, roleSystem},
		{"", "alice@example.com", roleOperator},
		{"", "dlqctl:bob", roleOperator},
		{"", "local-operator", roleOperator},
		// A stored role wins over the name's.
		{roleApprover, "alice@example.com", roleApprover},
		{roleOperator, "dlqctl:bob", roleOperator},
		{roleTenant, tenantKey, roleTenant},
		{roleTriageAgent, agentkit.TriageActor("ceo"), roleTriageAgent},
		// One the API does not know is not shown: the name decides.
		{"admin", "alice@example.com", roleOperator},
		{"alice@example.com", "classify", roleSystem},
	} {
		if got := actorRole(tt.stored, tt.by); got != tt.want {
			t.Errorf("actorRole(%q, %q) = %q, want %q", tt.stored, tt.by, got, tt.want)
		}
	}
}

// A transition's note names its own mover by role (the cases of every
// mover's name in notes are authority.Redact's test).
func TestTransitionNoteNamesItsMoverByRole(t *testing.T) {
	for _, tt := range []struct{ note, by, role, want string }{
		{"approved by alice@example.com; headers set: X-A", "alice@example.com", roleOperator, "approved by operator; headers set: X-A"},
		{"replay now requested by tenant-api:acme:key-0123456789abcdef", "tenant-api:acme:key-0123456789abcdef", roleTenant, "replay now requested by tenant"},
		{"breaker probe sent by bob: bob checked the downstream", "bob", roleApprover, "breaker probe sent by approver: approver checked the downstream"},
		{"approved by alice@example.com (approver)", "alice@example.com", roleApprover, "approved by approver"},
		{"approved by agent:ceo (triage_agent)", "agent:ceo", roleTriageAgent, "approved by triage_agent"},
		{"discarded: obsolete", "carol@example.com", roleOperator, "discarded: obsolete"},
		// jsdlq's functions are no one's identity; their notes stay whole.
		{"task replay-r1 of replay", replay.By, roleSystem, "task replay-r1 of replay"},
		{"", "alice@example.com", roleOperator, ""},
	} {
		tr := store.Transition{To: "scheduled", By: tt.by, Role: authority.Role(tt.role), Note: tt.note}
		if got := apiTransitionOf(tr, nil).Note; got != tt.want {
			t.Errorf("apiTransitionOf(%+v).Note = %q, want %q", tr, got, tt.want)
		}
	}
}

// The wire types and openapi.json's schemas have the same fields, and a
// field is required in the document exactly when the type always writes
// it; every answer's schema is closed, so a field added to a type alone
// fails the validation of the answers (TestTenantAPIMatchesOpenAPI) and
// one added to the document alone fails here.
func TestWireTypesMatchOpenAPI(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for _, tt := range []struct {
		v      any
		schema string // a schema's name, and ".property" for an inline one
		answer bool   // an answer's, whose required fields are checked
	}{
		{apiEntrySummary{}, "EntrySummary", true},
		{apiEntry{}, "Entry", true},
		{apiFailure{}, "Failure", true},
		{apiTransition{}, "Transition", true},
		{apiPayloadVersion{}, "PayloadVersion", true},
		{apiEntryPage{}, "EntryPage", true},
		{apiActionResult{}, "ActionResult", true},
		{apiWebhook{}, "Webhook", true},
		{apiWebhookList{}, "WebhookList", true},
		{apiAddedWebhook{}, "AddedWebhook", true},
		{apiRemovedWebhook{}, "RemovedWebhook", true},
		{apiErrorBody{}, "Error", true},
		{apiError{}, "Error.error", true},
		{apiReasonBody{}, "ReasonBody", false},
		{apiAddWebhookBody{}, "AddWebhookBody", false},
	} {
		name, inner, _ := strings.Cut(tt.schema, ".")
		s, ok := schemas[name].(map[string]any)
		if !ok {
			t.Errorf("openapi.json has no schema %s", name)
			continue
		}
		if inner != "" {
			s = s["properties"].(map[string]any)[inner].(map[string]any)
		}
		if s["additionalProperties"] != false && s["unevaluatedProperties"] != false {
			t.Errorf("schema %s admits properties it does not name", tt.schema)
		}
		props, required := schemaFields(t, schemas, s)
		fields, always := jsonFields(reflect.TypeOf(tt.v))
		if d := cmp.Diff(fields, props); d != "" {
			t.Errorf("%T's fields (-) and schema %s's properties (+):\n%s", tt.v, tt.schema, d)
		}
		if d := cmp.Diff(always, required); tt.answer && d != "" {
			t.Errorf("%T's always-written fields (-) and schema %s's required (+):\n%s", tt.v, tt.schema, d)
		}
	}

	enum := func(s map[string]any) []string {
		var out []string
		for _, v := range s["enum"].([]any) {
			out = append(out, v.(string))
		}
		return out
	}
	var statuses []string
	for _, st := range store.AllStatuses {
		statuses = append(statuses, string(st))
	}
	kinds := []string{string(event.KindMaxDeliver), string(event.KindTerminated), string(event.KindExplicit)}
	entryMore := schemas["Entry"].(map[string]any)["allOf"].([]any)[1].(map[string]any)["properties"].(map[string]any)
	for _, tt := range []struct {
		name      string
		doc, code []string
	}{
		{"Status", enum(schemas["Status"].(map[string]any)), statuses},
		{"ActorRole", enum(schemas["ActorRole"].(map[string]any)), actorRoles},
		{"VersionAuthor", enum(schemas["VersionAuthor"].(map[string]any)), append([]string{authorCapture}, actorRoles...)},
		{"Entry.kinds", enum(entryMore["kinds"].(map[string]any)["items"].(map[string]any)), kinds},
	} {
		if d := cmp.Diff(tt.code, tt.doc); d != "" {
			t.Errorf("%s: the code's values (-) and the document's enum (+):\n%s", tt.name, d)
		}
	}
	for _, k := range kinds {
		if !event.Kind(k).Valid() {
			t.Errorf("kind %q is not an event kind", k)
		}
	}
}

// schemaFields are the properties of schema s (with those of every schema
// it is allOf) and which of them are required, both sorted.
func schemaFields(t *testing.T, schemas map[string]any, s map[string]any) (props, required []string) {
	t.Helper()
	if ref, ok := s["$ref"].(string); ok {
		s = schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
	}
	ps, _ := s["properties"].(map[string]any)
	for name := range ps {
		props = append(props, name)
	}
	rs, _ := s["required"].([]any)
	for _, r := range rs {
		required = append(required, r.(string))
	}
	subs, _ := s["allOf"].([]any)
	for _, sub := range subs {
		p, r := schemaFields(t, schemas, sub.(map[string]any))
		props, required = append(props, p...), append(required, r...)
	}
	slices.Sort(props)
	slices.Sort(required)
	return slices.Compact(props), slices.Compact(required)
}

// jsonFields are the JSON names of struct type typ's fields (an embedded
// struct's flattened, as encoding/json does) and those written always
// (without omitempty or omitzero), both sorted.
func jsonFields(typ reflect.Type) (names, always []string) {
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			n, a := jsonFields(f.Type)
			names, always = append(names, n...), append(always, a...)
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		names = append(names, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			always = append(always, name)
		}
	}
	slices.Sort(names)
	slices.Sort(always)
	return names, always
}
