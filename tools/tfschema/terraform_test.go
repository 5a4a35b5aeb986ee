package tfschema

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// These tests run the real terraform binary against the plugin, so what
// they assert is Terraform's own verdict on a configuration given the
// served schema.

type provider struct{ addr, version string }

type terraformRig struct {
	terraform string
	cliConfig string
}

// rigOption adds environment to the plugin's wrapper script.
type rigOption string

// withPlaceholderData lets the plugin read data sources (placeholders).
const withPlaceholderData rigOption = "TFSCHEMA_DATA=placeholder "

// newRig installs the plugin (built once per test binary), behind one
// wrapper script per provider, in a filesystem mirror that a private CLI
// config points at.
func newRig(t *testing.T, schemaFile string, providers []provider, opts ...rigOption) *terraformRig {
	t.Helper()
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("terraform is not on PATH; skipping the end-to-end tests of the schema provider")
	}
	plugin := testenv.Binary(t, "github.com/jsdlq/jsdlq/tools/tfschema/cmd/terraform-provider-tfschema")
	root := t.TempDir()

	platform := runtime.GOOS + "_" + runtime.GOARCH
	var includes []string
	for _, p := range providers {
		typ := p.addr[strings.LastIndex(p.addr, "/")+1:]
		dir := filepath.Join(root, "mirror", p.addr, p.version, platform)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var extra strings.Builder
		for _, o := range opts {
			extra.WriteString(string(o))
		}
		wrapper := fmt.Sprintf("#!/bin/sh\n%sTFSCHEMA_FILE=%q TFSCHEMA_PROVIDER=%q exec %q \"$@\"\n", extra.String(), schemaFile, p.addr, plugin)
		if err := os.WriteFile(filepath.Join(dir, "terraform-provider-"+typ+"_v"+p.version), []byte(wrapper), 0o755); err != nil {
			t.Fatal(err)
		}
		includes = append(includes, fmt.Sprintf("%q", p.addr))
	}
	list := strings.Join(includes, ", ")
	cfg := fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path    = %q\n    include = [%s]\n  }\n  direct {\n    exclude = [%s]\n  }\n}\n",
		filepath.Join(root, "mirror"), list, list)
	cliConfig := filepath.Join(root, "cli.tfrc")
	if err := os.WriteFile(cliConfig, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return &terraformRig{terraform: tf, cliConfig: cliConfig}
}

// validate writes config to a fresh directory, runs terraform init and
// terraform validate there and returns validate's combined output.
func (r *terraformRig) validate(t *testing.T, config string) (string, error) {
	t.Helper()
	dir := r.initDir(t, config)
	return r.run(t, dir, "validate", "-no-color")
}

// initDir writes config to a fresh directory and runs terraform init there.
func (r *terraformRig) initDir(t *testing.T, config string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := r.run(t, dir, "init", "-backend=false", "-input=false", "-no-color"); err != nil {
		t.Fatalf("terraform init: %v\n%s", err, out)
	}
	return dir
}

func (r *terraformRig) run(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.terraform, append([]string{"-chdir=" + dir}, args...)...)
	env := []string{"TF_CLI_CONFIG_FILE=" + r.cliConfig, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TF_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// validateCase is a configuration and what terraform validate says of it.
type validateCase struct {
	name   string
	config string
	want   []string // substrings of terraform's output; empty = must pass
}

// validateAll validates each case's config after header, a subtest each.
func (r *terraformRig) validateAll(t *testing.T, header string, tests []validateCase) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each in a directory of its own
			out, err := r.validate(t, header+tt.config)
			if len(tt.want) == 0 {
				if err != nil || !strings.Contains(out, "Success! The configuration is valid.") {
					t.Fatalf("terraform validate = %v, want success; output:\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("terraform validate succeeded, want failure with %q; output:\n%s", tt.want, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(squash(out), squash(w)) {
					t.Errorf("terraform validate output lacks %q; output:\n%s", w, out)
				}
			}
		})
	}
}

// squash collapses whitespace runs: terraform wraps long messages to the
// terminal width.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

const googleHeader = `
terraform {
  required_providers {
    google  = { source = "hashicorp/google", version = "~> 7.0" }
    archive = { source = "hashicorp/archive", version = "~> 2.8" }
  }
}

provider "google" {
  project = "p1"
  region  = "europe-west1"
}
`

func TestTerraformValidateGoogleSchema(t *testing.T) {
	t.Parallel()
	rig := newRig(t, testenv.ProvidersSchema(t), []provider{
		{"registry.terraform.io/hashicorp/google", "7.45.0"},
		{"registry.terraform.io/hashicorp/archive", "2.8.0"},
	})

	tests := []validateCase{
		{
			name: "correct config passes",
			config: `
resource "google_pubsub_topic" "events" {
  name = "dlq-events"
}

resource "google_pubsub_subscription" "classify" {
  name                 = "dlq-events-classify"
  topic                = google_pubsub_topic.events.id
  ack_deadline_seconds = 60

  push_config {
    push_endpoint = "https://classify.example"
    oidc_token {
      service_account_email = "push@p1.iam.gserviceaccount.com"
    }
  }

  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.events.id
    max_delivery_attempts = 5
  }
}

data "archive_file" "src" {
  type        = "zip"
  source_dir  = "."
  output_path = "src.zip"
  excludes    = ["*.zip"]
}

output "location" {
  value = provider::google::location_from_id("projects/p1/locations/europe-west1/queues/q")
}
`,
		},
		{
			name: "wrong attribute name",
			config: `
resource "google_pubsub_topic" "events" {
  name         = "dlq-events"
  message_ttl  = "600s"
}
`,
			want: []string{"Error: Unsupported argument", `An argument named "message_ttl" is not expected here.`},
		},
		{
			name: "missing required attribute",
			config: `
resource "google_pubsub_subscription" "classify" {
  name = "dlq-events-classify"
}
`,
			want: []string{"Error: Missing required argument", `The argument "topic" is required, but no definition was found.`},
		},
		{
			name: "wrong nested block",
			config: `
resource "google_pubsub_subscription" "classify" {
  name  = "dlq-events-classify"
  topic = "projects/p1/topics/dlq-events"

  push_config {
    push_endpoint = "https://classify.example"
    dead_letter_policy {
      max_delivery_attempts = 5
    }
  }
}
`,
			want: []string{"Error: Unsupported block type", `Blocks of type "dead_letter_policy" are not expected here.`},
		},
		{
			name: "block given twice where the schema allows one",
			config: `
resource "google_pubsub_subscription" "classify" {
  name  = "dlq-events-classify"
  topic = "projects/p1/topics/dlq-events"

  retry_policy {
    minimum_backoff = "10s"
  }
  retry_policy {
    minimum_backoff = "20s"
  }
}
`,
			want: []string{`Too many retry_policy blocks`},
		},
		{
			name: "wrong value type",
			config: `
resource "google_pubsub_subscription" "classify" {
  name                 = "dlq-events-classify"
  topic                = "projects/p1/topics/dlq-events"
  ack_deadline_seconds = ["sixty"]
}
`,
			want: []string{"Error: Incorrect attribute value type", `Inappropriate value for attribute "ack_deadline_seconds": number required`},
		},
		{
			name: "unknown resource type",
			config: `
resource "google_pubsub_topik" "events" {
  name = "dlq-events"
}
`,
			want: []string{"Error: Invalid resource type", `The provider hashicorp/google does not support resource type "google_pubsub_topik"`},
		},
		{
			name: "archive provider schema is served too",
			config: `
data "archive_file" "src" {
  type        = "zip"
  output_path = "src.zip"
  source_dirs = ["."]
}
`,
			want: []string{`An argument named "source_dirs" is not expected here.`},
		},
	}
	rig.validateAll(t, googleHeader, tests)
}

// editedHeader requires the google provider alone.
const editedHeader = `
terraform {
  required_providers {
    google = { source = "hashicorp/google", version = "~> 7.0" }
  }
}

provider "google" {
  project = "p1"
  region  = "europe-west1"
}
`

// editedRig is a terraform rig whose google provider serves the real
// schema of ../shared/terraform with the constructs it does not use made
// from its own blocks (everyConstruct), written by the test.
func editedRig(t *testing.T, opts ...rigOption) *terraformRig {
	t.Helper()
	schemaFile := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(schemaFile, edited(t, everyConstruct), 0o644); err != nil {
		t.Fatal(err)
	}
	return newRig(t, schemaFile, []provider{{"registry.terraform.io/hashicorp/google", "7.45.0"}}, opts...)
}

// TestTerraformValidateNestedAttributes drives, through terraform, the
// nested attribute types (protocol 6 only), map and group blocks that the
// google schema does not use, made from its own blocks, and the block
// bounds and computed-only attributes it does use.
func TestTerraformValidateNestedAttributes(t *testing.T) {
	t.Parallel()
	rig := editedRig(t)
	tests := []validateCase{
		{
			name: "correct config passes",
			config: `
resource "google_cloud_tasks_queue" "q" {
  name                       = "q"
  location                   = "europe-west1"
  retry_config               = [{ max_attempts = 3 }, { max_backoff = "10s" }]
  stackdriver_logging_config = { sampling_ratio = 0.5 }

  rate_limits {
    max_dispatches_per_second = 5
  }
  app_engine_routing_override "default" {
    service = "s"
  }
  timeouts {
    create = "5m"
  }
}

resource "google_compute_firewall" "f" {
  name    = "f"
  network = "n"
  allow {
    protocol = "tcp"
  }
}

data "google_storage_bucket" "b" {
  name = "b"
}
`,
		},
		{
			name: "missing attribute inside a nested attribute object",
			config: `
resource "google_cloud_tasks_queue" "q" {
  name                       = "q"
  location                   = "europe-west1"
  stackdriver_logging_config = {}
}
`,
			want: []string{`attribute "sampling_ratio" is required`},
		},
		{
			name: "fewer blocks than min_items",
			config: `
resource "google_compute_snapshot_settings" "s" {
}
`,
			want: []string{`Insufficient storage_location blocks`},
		},
		{
			name: "more blocks than max_items",
			config: `
resource "google_cloud_tasks_queue" "q" {
  name     = "q"
  location = "europe-west1"
  rate_limits {
    max_dispatches_per_second = 1
  }
  rate_limits {
    max_dispatches_per_second = 2
  }
}
`,
			want: []string{`Too many rate_limits blocks`},
		},
		{
			name: "computed-only attribute set in config",
			config: `
resource "google_cloud_tasks_queue" "q" {
  name     = "q"
  location = "europe-west1"
  rate_limits {
    max_burst_size = 5
  }
}
`,
			want: []string{`Error: Computed attribute cannot be set`, `"max_burst_size" is computed by the provider`},
		},
	}
	rig.validateAll(t, editedHeader, tests)
}

// TestTerraformPlanAndApply runs the plan-side RPCs through terraform:
// computed attributes become "known after apply", write-only values never
// show, data sources read as placeholders only when asked to, a provider
// function is evaluated, and apply is refused with a clear message rather
// than pretending to create anything.
func TestTerraformPlanAndApply(t *testing.T) {
	t.Parallel()
	const config = editedHeader + `
data "google_storage_bucket" "b" {
  name = "b"
}

resource "google_secret_manager_secret_version" "v" {
  secret         = "thing-${data.google_storage_bucket.b.url}"
  secret_data_wo = "hunter2"
}

resource "google_cloud_tasks_queue" "q" {
  name         = "q"
  location     = "europe-west1"
  retry_config = [{ max_backoff = "10s" }]
  rate_limits {
    max_dispatches_per_second = 5
  }
}

output "project" {
  value = provider::google::project_from_id("projects/p1/locations/l/things/a")
}
`
	t.Run("data sources refuse without placeholders", func(t *testing.T) {
		t.Parallel()
		rig := editedRig(t)
		dir := rig.initDir(t, config)
		out, err := rig.run(t, dir, "plan", "-input=false", "-no-color")
		if err == nil || !strings.Contains(squash(out), "tfschema: reading a data source is not supported") {
			t.Fatalf("terraform plan = %v, want the data source refused; output:\n%s", err, out)
		}
	})

	rig := editedRig(t, withPlaceholderData)
	dir := rig.initDir(t, config)
	out, err := rig.run(t, dir, "plan", "-input=false", "-no-color")
	if err != nil {
		t.Fatalf("terraform plan: %v\n%s", err, out)
	}
	for _, want := range []string{
		`secret = "thing-` + Placeholder + `"`,
		`id = (known after apply)`,
		`max_burst_size = (known after apply)`,
		`max_attempts = (known after apply)`,
		`secret_data_wo = (write-only attribute)`,
		`+ project = "p1"`,
		`Plan: 2 to add, 0 to change, 0 to destroy.`,
	} {
		if !strings.Contains(squash(out), squash(want)) {
			t.Errorf("terraform plan output lacks %q; output:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("terraform plan shows the write-only value; output:\n%s", out)
	}

	out, err = rig.run(t, dir, "apply", "-auto-approve", "-input=false", "-no-color")
	if err == nil || !strings.Contains(squash(out), "tfschema: apply is not supported") {
		t.Fatalf("terraform apply = %v, want it refused; output:\n%s", err, out)
	}
}
