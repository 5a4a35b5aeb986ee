package tfschema

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const policyReadme = `
| Account | Role | Where | Why |
|---|---|---|---|
| classify | ` + "`roles/datastore.user`" + ` | **project** | Firestore has no resource-level binding |
| bridge | ` + "`roles/pubsub.publisher`" + ` | topic | publish |
Prose mentioning roles/owner and the project is not a table row.
`

func TestCheckPlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		plan string
		want []string
	}{
		{
			name: "allowed project roles and resource-level grants pass",
			plan: `{"resource_changes":[
			  {"address":"a","type":"google_project_iam_member","change":{"actions":["create"],"after":{"role":"roles/logging.logWriter","project":"p"}}},
			  {"address":"b","type":"google_project_iam_member","change":{"actions":["create"],"after":{"role":"roles/monitoring.metricWriter"}}},
			  {"address":"c","type":"google_project_iam_member","change":{"actions":["create"],"after":{"role":"roles/datastore.user","condition":[{"title":"db"}]}}},
			  {"address":"d","type":"google_pubsub_topic_iam_member","change":{"actions":["create"],"after":{"role":"roles/pubsub.publisher"}}}]}`,
		},
		{
			name: "public principals anywhere fail",
			plan: `{"resource_changes":[
			  {"address":"run","type":"google_cloud_run_v2_service_iam_member","change":{"actions":["create"],"after":{"role":"roles/run.invoker","member":"allUsers"}}},
			  {"address":"bucket","type":"google_storage_bucket_iam_binding","change":{"actions":["update"],"after":{"members":["user:a@b","allAuthenticatedUsers"]}}},
			  {"address":"policy","type":"google_cloud_run_v2_service_iam_policy","change":{"actions":["create"],"after":{"policy_data":"{\"bindings\":[{\"members\":[\"allUsers\"]}]}"}}}]}`,
			want: []string{
				`bucket: grants to allAuthenticatedUsers ("allAuthenticatedUsers")`,
				`policy: grants to allUsers ("{\"bindings\":[{\"members\":[\"allUsers\"]}]}")`,
				`run: grants to allUsers ("allUsers")`,
			},
		},
		{
			name: "unlisted or authoritative project roles fail",
			plan: `{"resource_changes":[
			  {"address":"owner","type":"google_project_iam_member","change":{"actions":["create"],"after":{"role":"roles/owner"}}},
			  {"address":"unknown","type":"google_project_iam_member","change":{"actions":["create"],"after":{}}},
			  {"address":"binding","type":"google_project_iam_binding","change":{"actions":["create"],"after":{"role":"roles/logging.logWriter"}}}]}`,
			want: []string{
				"binding: google_project_iam_binding is authoritative at project level; use google_project_iam_member",
				"owner: project-level roles/owner is not listed with its reason in terraform/README.md",
				"unknown: project-level role is not known at plan time",
			},
		},
		{
			name: "deletions are not grants",
			plan: `{"resource_changes":[{"address":"old","type":"google_project_iam_member","change":{"actions":["delete"],"after":null}}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckPlan([]byte(tt.plan), policyReadme)
			if err != nil {
				t.Fatalf("CheckPlan error = %v", err)
			}
			var gotS []string
			for _, v := range got {
				gotS = append(gotS, v.String())
			}
			if diff := cmp.Diff(tt.want, gotS); diff != "" {
				t.Errorf("CheckPlan violations (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := CheckPlan([]byte(`{"resource_changes": [`), ""); err == nil || !strings.Contains(err.Error(), "decode plan JSON") {
		t.Errorf("CheckPlan(truncated) error = %v, want a decode error", err)
	}
}
