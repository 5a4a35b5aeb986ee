package deploycheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// TestUpgradeDestroysNothing plans today's configuration against the state
// of an earlier deployment (testdata/deployed-addresses.txt): every resource
// it holds must keep its address or be moved by a moved block. A resource
// given a new address without one would be destroyed and re-created (for a
// topic, the queue or the database: with what it holds). The state knows the
// addresses, not the deployed attributes, so a change of an attribute that
// forces a replacement in place is not what this test catches.
func TestUpgradeDestroysNothing(t *testing.T) {
	t.Parallel()
	schema := testenv.ProvidersSchema(t)
	addrs := readAddresses(t, "testdata/deployed-addresses.txt")
	state, err := deployedState(schema, addrs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := makePlan(testenv.ModuleRoot(t), schema, state,
		"-var", "bridge_image=europe-west1-docker.pkg.dev/my-jsdlq-project/jsdlq/bridge:v1",
		"-var", "console_image=europe-west1-docker.pkg.dev/my-jsdlq-project/jsdlq/console:v1",
		"-var", `console_approvers=["group:jsdlq-operators@example.com"]`)
	if err != nil {
		t.Fatalf("offline terraform plan against the deployed state: %v", err)
	}
	kept, deleted := map[string]bool{}, map[string]bool{}
	for _, c := range p.ResourceChanges {
		if slices.Contains(c.Change.Actions, "delete") {
			t.Errorf("upgrade plan: %s %v, want it kept (a moved block where its address changed)", c.Address, c.Change.Actions)
			deleted[c.Address] = true
			continue
		}
		kept[c.Address] = true
		if c.PreviousAddress != "" {
			kept[c.PreviousAddress] = true
		}
	}
	// Also shows that the plan read the state: planned without it, nothing
	// would be kept.
	for _, a := range addrs {
		if !kept[a] && !deleted[a] {
			t.Errorf("upgrade plan keeps no deployed %s", a)
		}
	}
}

// readAddresses reads a list of resource instance addresses, one a line,
// '#' starting a comment.
func readAddresses(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// deployedState is a state file holding the resource instances at addrs.
// What Terraform plans from a prior state is the configuration, except for
// computed attributes: those that are strings hold a placeholder, as a
// provider would have filled them in (members, emails, names the
// configuration reads). The project's services are left out, so that they
// are planned anew and the project data source is read at apply: read
// offline it holds a placeholder, not the project number the console
// module checks.
func deployedState(schemaPath string, addrs []string) ([]byte, error) {
	b, err := os.ReadFile(schemaPath)
	if err != nil {
		return nil, err
	}
	const google = "registry.terraform.io/hashicorp/google"
	var sc struct {
		ProviderSchemas map[string]struct {
			ResourceSchemas map[string]struct {
				Version int64 `json:"version"`
				Block   struct {
					Attributes map[string]struct {
						Type     any  `json:"type"`
						Computed bool `json:"computed"`
					} `json:"attributes"`
				} `json:"block"`
			} `json:"resource_schemas"`
		} `json:"provider_schemas"`
	}
	if err := json.Unmarshal(b, &sc); err != nil {
		return nil, fmt.Errorf("decode %s: %w", schemaPath, err)
	}
	type instance struct {
		IndexKey            any            `json:"index_key,omitempty"`
		SchemaVersion       int64          `json:"schema_version"`
		Attributes          map[string]any `json:"attributes"`
		SensitiveAttributes []any          `json:"sensitive_attributes"`
	}
	type resource struct {
		Module    string     `json:"module,omitempty"`
		Mode      string     `json:"mode"`
		Type      string     `json:"type"`
		Name      string     `json:"name"`
		Provider  string     `json:"provider"`
		Instances []instance `json:"instances"`
	}
	var resources []*resource
	byResource := map[string]*resource{}
	for _, a := range addrs {
		module, typ, name, key, err := parseAddress(a)
		if err != nil {
			return nil, err
		}
		if typ == "google_project_service" {
			continue
		}
		rs, ok := sc.ProviderSchemas[google].ResourceSchemas[typ]
		if !ok {
			return nil, fmt.Errorf("%s: no resource type %s in the provider schema", a, typ)
		}
		attrs := map[string]any{}
		for n, at := range rs.Block.Attributes {
			if at.Computed && at.Type == "string" {
				attrs[n] = "placeholder-" + n
			}
		}
		id := module + "." + typ + "." + name
		r := byResource[id]
		if r == nil {
			r = &resource{Module: module, Mode: "managed", Type: typ, Name: name, Provider: `provider["` + google + `"]`}
			byResource[id] = r
			resources = append(resources, r)
		}
		r.Instances = append(r.Instances, instance{IndexKey: key, SchemaVersion: rs.Version, Attributes: attrs, SensitiveAttributes: []any{}})
	}
	return json.Marshal(map[string]any{
		"version": 4, "terraform_version": "1.11.0", "serial": 1, "lineage": "deploycheck-upgrade",
		"outputs": map[string]any{}, "resources": resources,
	})
}

// parseAddress splits a resource instance address,
// module.a["k"].TYPE.NAME["key"], into its module path, type, name and
// index key (a string, a number or nil).
func parseAddress(a string) (module, typ, name string, key any, err error) {
	rest := a
	if strings.HasSuffix(rest, "]") {
		i := strings.LastIndex(rest, "[")
		k := rest[i+1 : len(rest)-1]
		if key, err = strconv.Unquote(k); err != nil {
			if key, err = strconv.Atoi(k); err != nil {
				return "", "", "", nil, fmt.Errorf("address %s: index %s is neither a string nor a number", a, k)
			}
		}
		rest = rest[:i]
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 {
		return "", "", "", nil, fmt.Errorf("address %s: want [module path.]TYPE.NAME", a)
	}
	return strings.Join(parts[:len(parts)-2], "."), parts[len(parts)-2], parts[len(parts)-1], key, nil
}
