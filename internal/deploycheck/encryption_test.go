package deploycheck

import (
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
)

const (
	cmekKey    = "projects/my-jsdlq-project/locations/europe-west1/keyRings/jsdlq/cryptoKeys/data"
	secretsKey = "projects/my-jsdlq-project/locations/europe-west1/keyRings/jsdlq/cryptoKeys/webhook-secrets"
)

var (
	cmekOnce    sync.Once
	cmekPlanned *tfPlan
	cmekErr     error
)

// cmekPlan plans the deployment with the console, a customer-managed key
// and an existing key for the webhook secrets, once per test binary.
func cmekPlan(t *testing.T) *tfPlan {
	t.Helper()
	schema := testenv.ProvidersSchema(t)
	cmekOnce.Do(func() {
		cmekPlanned, cmekErr = makePlan(testenv.ModuleRoot(t), schema, nil,
			"-var", "console_image=europe-west1-docker.pkg.dev/my-jsdlq-project/jsdlq/console:v1",
			"-var", `console_operators=["group:jsdlq-operators@example.com"]`,
			"-var", "kms_key_name="+cmekKey, "-var", "secrets_kms_key_name="+secretsKey)
	})
	if cmekErr != nil {
		t.Fatalf("offline terraform plan with kms_key_name: %v", cmekErr)
	}
	return cmekPlanned
}

// keyGrants are the planned IAM members on key, role by resource address
// (the members are service accounts and agents whose emails the offline
// plan cannot know).
func keyGrants(p *tfPlan, key string) map[string]string {
	out := map[string]string{}
	for _, r := range p.resources("google_kms_crypto_key_iam_member") {
		if str(r.Values["crypto_key_id"]) == key {
			out[r.Address] = str(r.Values["role"])
		}
	}
	return out
}

// TestPlanCMEK: with kms_key_name the real-provider plan encrypts the
// Firestore database, every Pub/Sub topic and the source bucket with the
// key, and grants exactly the three service agents that use it
// encrypter/decrypter on it; without it, none of that is planned.
func TestPlanCMEK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		plan *tfPlan
		key  string
	}{
		{"with kms_key_name", cmekPlan(t), cmekKey},
		{"without", offlinePlan(t), ""},
	} {
		p := tc.plan
		dbs := p.resources("google_firestore_database")
		if len(dbs) != 1 {
			t.Fatalf("%s: %d Firestore databases planned, want 1", tc.name, len(dbs))
		}
		if got := str(block(dbs[0].Values, "cmek_config")["kms_key_name"]); got != tc.key {
			t.Errorf("%s: Firestore cmek_config.kms_key_name = %q, want %q", tc.name, got, tc.key)
		}
		var topics []string
		for _, r := range p.resources("google_pubsub_topic") {
			topics = append(topics, str(r.Values["name"]))
			if got := str(r.Values["kms_key_name"]); got != tc.key {
				t.Errorf("%s: topic %s kms_key_name = %q, want %q", tc.name, r.Values["name"], got, tc.key)
			}
		}
		if len(topics) != 5 {
			t.Errorf("%s: topics %q, want dlq-events, its dead-letter topic, dlq-notifications, dlq-changes and its dead-letter topic", tc.name, topics)
		}
		buckets := p.resources("google_storage_bucket")
		if len(buckets) != 1 {
			t.Fatalf("%s: %d buckets planned, want the source bucket", tc.name, len(buckets))
		}
		if got := str(block(buckets[0].Values, "encryption")["default_kms_key_name"]); got != tc.key {
			t.Errorf("%s: source bucket encryption.default_kms_key_name = %q, want %q", tc.name, got, tc.key)
		}
		grants := keyGrants(p, cmekKey)
		if tc.key == "" {
			if len(grants) != 0 {
				t.Errorf("%s: grants on a CMEK key %v, want none", tc.name, grants)
			}
			continue
		}
		want := map[string]string{}
		for _, agent := range []string{"firestore", "pubsub", "storage"} {
			want[`google_kms_crypto_key_iam_member.cmek["`+agent+`"]`] = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
		}
		if d := cmp.Diff(want, grants); d != "" {
			t.Errorf("%s: grants on the CMEK key (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestPlanSecretsKey: by default Terraform creates the webhook secrets'
// key (rotated) and grants deliver encrypt/decrypt on it; with
// secrets_kms_key_name it creates none and grants on that key, deliver
// and the console get it as SECRETS_KMS_KEY, and the console may only
// encrypt.
func TestPlanSecretsKey(t *testing.T) {
	t.Parallel()
	def := offlinePlan(t)
	keys := def.resources("google_kms_crypto_key")
	if len(keys) != 1 || str(keys[0].Values["rotation_period"]) != "7776000s" || str(keys[0].Values["purpose"]) != "ENCRYPT_DECRYPT" {
		t.Fatalf("default plan's KMS keys = %+v, want the webhook secrets' key, ENCRYPT_DECRYPT, rotated every 90 days", keys)
	}
	var roles []string
	for _, r := range def.resources("google_kms_crypto_key_iam_member") {
		roles = append(roles, r.Address+" "+str(r.Values["role"]))
	}
	if want := []string{`google_kms_crypto_key_iam_member.secrets["deliver"] roles/cloudkms.cryptoKeyEncrypterDecrypter`}; !slices.Equal(roles, want) {
		t.Errorf("default plan's grants on KMS keys = %q, want %q", roles, want)
	}

	p := cmekPlan(t)
	if n := len(p.resources("google_kms_crypto_key")) + len(p.resources("google_kms_key_ring")); n != 0 {
		t.Errorf("with secrets_kms_key_name the plan creates %d KMS resources, want none", n)
	}
	want := map[string]string{
		`google_kms_crypto_key_iam_member.secrets["deliver"]`: "roles/cloudkms.cryptoKeyEncrypterDecrypter",
		`google_kms_crypto_key_iam_member.secrets["console"]`: "roles/cloudkms.cryptoKeyEncrypter",
	}
	if d := cmp.Diff(want, keyGrants(p, secretsKey)); d != "" {
		t.Errorf("grants on the secrets key (-want +got):\n%s", d)
	}
	envs := map[string]map[string]any{}
	for _, r := range p.resources("google_cloudfunctions2_function") {
		envs[str(r.Values["name"])], _ = block(r.Values, "service_config")["environment_variables"].(map[string]any)
	}
	if got := str(envs["jsdlq-deliver"]["SECRETS_KMS_KEY"]); got != secretsKey {
		t.Errorf("deliver's SECRETS_KMS_KEY = %q, want %q", got, secretsKey)
	}
	consoles := 0
	for _, r := range p.resources("google_cloud_run_v2_service") {
		env := map[string]string{}
		for _, c := range block(r.Values, "template")["containers"].([]any) {
			for _, e := range c.(map[string]any)["env"].([]any) {
				env[str(e.(map[string]any)["name"])] = str(e.(map[string]any)["value"])
			}
		}
		if env["CONSOLE_SERVE"] == "" {
			continue
		}
		consoles++
		if env["SECRETS_KMS_KEY"] != secretsKey {
			t.Errorf("console %s SECRETS_KMS_KEY = %q, want %q", r.Values["name"], env["SECRETS_KMS_KEY"], secretsKey)
		}
		// Each service answers at its own URL only (the project's number
		// in it is not known to an offline plan).
		if _, ok := env["CONSOLE_URLS"]; !ok {
			t.Errorf("console %s has no CONSOLE_URLS", r.Values["name"])
		}
	}
	if consoles != 2 {
		t.Errorf("%d console services planned, want 2", consoles)
	}
}

// TestPlanOwnURLsDocument: Terraform writes the deployment's own URLs to
// the document store.OwnURLs reads.
func TestPlanOwnURLsDocument(t *testing.T) {
	t.Parallel()
	docs := offlinePlan(t).resources("google_firestore_document")
	var found []string
	for _, d := range docs {
		found = append(found, str(d.Values["collection"])+"/"+str(d.Values["document_id"]))
	}
	if want := []string{store.Deployment + "/" + store.OwnURLsDoc}; !slices.Equal(found, want) {
		t.Errorf("planned Firestore documents %q, want %q (store.Deployment/store.OwnURLsDoc)", found, want)
	}
}
