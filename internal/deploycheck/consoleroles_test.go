package deploycheck

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
)

// The console's roles in Terraform: every principal of the three variables
// passes IAP to the operator UI, the UI service is told each role's
// principals in the variables the console reads, and the console accepts
// what Terraform sets. Without anyone in a role, or with a principal that is
// not one, the plan is refused.
func TestConsoleRolesPlan(t *testing.T) {
	t.Parallel()
	schema := testenv.ProvidersSchema(t)
	root := testenv.ModuleRoot(t)
	const image = "console_image=europe-west1-docker.pkg.dev/my-jsdlq-project/jsdlq/console:v1"
	p, err := makePlan(root, schema, nil, "-var", image,
		"-var", `console_viewers=["domain:example.com"]`,
		"-var", `console_operators=["group:oncall@example.com", "user:ann@example.com"]`,
		"-var", `console_approvers=["user:boss@example.com"]`)
	if err != nil {
		t.Fatalf("offline plan with the console's roles: %v", err)
	}
	var members []string
	for _, r := range p.resources("google_iap_web_cloud_run_service_iam_member") {
		members = append(members, r.Values["member"].(string))
	}
	slices.Sort(members)
	if diff := cmp.Diff([]string{"domain:example.com", "group:oncall@example.com", "user:ann@example.com", "user:boss@example.com"}, members); diff != "" {
		t.Errorf("IAP members of the UI (-want +got):\n%s", diff)
	}

	env := map[string]string{}
	for _, r := range p.resources("google_cloud_run_v2_service") {
		if !strings.HasSuffix(r.Values["name"].(string), "-console") {
			continue
		}
		for _, c := range r.Values["template"].([]any)[0].(map[string]any)["containers"].([]any) {
			for _, kv := range c.(map[string]any)["env"].([]any) {
				e := kv.(map[string]any)
				if v, ok := e["value"].(string); ok {
					env[e["name"].(string)] = v
				}
			}
		}
	}
	want := map[string]string{"CONSOLE_VIEWERS": "domain:example.com", "CONSOLE_OPERATORS": "group:oncall@example.com,user:ann@example.com",
		"CONSOLE_APPROVERS": "user:boss@example.com", "CONSOLE_AUTH": "iap", "CONSOLE_SERVE": "ui"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("UI service env %s = %q, want %q", k, env[k], v)
		}
	}
	// The console reads what Terraform sets (the project, queue, replay URL
	// and IAP audience are the deployment's; an offline plan does not know
	// them).
	for k, v := range map[string]string{"GOOGLE_CLOUD_PROJECT": "p", "TASKS_QUEUE": "projects/p/locations/l/queues/q",
		"REPLAY_URL": "https://replay.example", "TASKS_SERVICE_ACCOUNT": "t@p.iam.gserviceaccount.com",
		"CONSOLE_IAP_AUDIENCE": "/projects/1/locations/l/services/jsdlq-console"} {
		if env[k] == "" {
			env[k] = v
		}
	}
	got, err := console.LoadEnv(config.MapLookup(env))
	if err != nil {
		t.Fatalf("console.LoadEnv(the UI service's environment) = %v", err)
	}
	if n := len(got.Principals[authority.Viewer]) + len(got.Principals[authority.Operator]) + len(got.Principals[authority.Approver]); n != 4 {
		t.Errorf("the console reads %d principals from Terraform's environment, want 4: %v", n, got.Principals)
	}

	for name, args := range map[string][]string{
		"nobody in a role": {"-var", image},
		"allUsers":         {"-var", image, "-var", `console_viewers=["allUsers"]`},
		"a bare email":     {"-var", image, "-var", `console_approvers=["boss@example.com"]`},
		"a domain with @":  {"-var", image, "-var", `console_operators=["domain:ann@example.com"]`},
	} {
		if _, err := makePlan(root, schema, nil, args...); err == nil || !strings.Contains(err.Error(), "console_") {
			t.Errorf("plan with %s = %v, want refused naming the console variable", name, err)
		}
	}
}
