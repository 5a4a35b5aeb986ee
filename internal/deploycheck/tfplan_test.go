package deploycheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// tfResource is one resource instance of a plan (planned values, or the
// prior state for data sources read while planning).
type tfResource struct {
	Address string         `json:"address"`
	Mode    string         `json:"mode"`
	Type    string         `json:"type"`
	Name    string         `json:"name"`
	Index   any            `json:"index"`
	Values  map[string]any `json:"values"`
}

type tfModule struct {
	Resources    []tfResource `json:"resources"`
	ChildModules []tfModule   `json:"child_modules"`
}

type tfPlan struct {
	// ResourceChanges has every resource instance's planned action, no-op
	// included; PreviousAddress is where a moved block moved it from.
	ResourceChanges []struct {
		Address         string `json:"address"`
		PreviousAddress string `json:"previous_address"`
		Change          struct {
			Actions []string `json:"actions"`
		} `json:"change"`
	} `json:"resource_changes"`
	PlannedValues struct {
		RootModule tfModule `json:"root_module"`
	} `json:"planned_values"`
	PriorState struct {
		Values struct {
			RootModule tfModule `json:"root_module"`
		} `json:"values"`
	} `json:"prior_state"`
}

// resources returns every resource instance of type typ in the plan.
func (p *tfPlan) resources(typ string) []tfResource {
	var out []tfResource
	var walk func(m tfModule)
	walk = func(m tfModule) {
		for _, r := range m.Resources {
			if r.Type == typ {
				out = append(out, r)
			}
		}
		for _, c := range m.ChildModules {
			walk(c)
		}
	}
	walk(p.PlannedValues.RootModule)
	walk(p.PriorState.Values.RootModule)
	return out
}

var (
	planOnce sync.Once
	plan     *tfPlan
	planErr  error
)

// offlinePlan plans a copy of terraform/ with terraform.tfvars.example,
// against the providers tools/tfschema serves from the provider schema
// file (as make tf-validate does: nothing is contacted, data sources read as
// placeholders), once per test binary.
func offlinePlan(t testing.TB) *tfPlan {
	t.Helper()
	schema := testenv.ProvidersSchema(t)
	planOnce.Do(func() { plan, planErr = makePlan(testenv.ModuleRoot(t), schema, nil) })
	if planErr != nil {
		t.Fatalf("offline terraform plan: %v", planErr)
	}
	return plan
}

// providers pins what the lock would (validate.sh's list).
var providers = []struct{ addr, version string }{
	{"registry.terraform.io/hashicorp/google", "7.45.0"},
	{"registry.terraform.io/hashicorp/archive", "2.8.0"},
}

// makePlan plans root's terraform/ offline with terraform.tfvars.example and
// args, against state (a state file's JSON) when it is not nil.
func makePlan(root, schema string, state []byte, args ...string) (*tfPlan, error) {
	tf, err := exec.LookPath("terraform")
	if err != nil {
		return nil, fmt.Errorf("terraform is not on PATH (make test needs it for tf-validate too): %w", err)
	}
	work, err := os.MkdirTemp("", "deploycheck-plan-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	plugin, err := testenv.BuildOnce("./tools/tfschema/cmd/terraform-provider-tfschema")
	if err != nil {
		return nil, err
	}
	var includes []string
	for _, p := range providers {
		typ := p.addr[strings.LastIndex(p.addr, "/")+1:]
		dir := filepath.Join(work, "mirror", p.addr, p.version, runtime.GOOS+"_"+runtime.GOARCH)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		wrapper := fmt.Sprintf("#!/bin/sh\nTFSCHEMA_FILE=%q TFSCHEMA_PROVIDER=%q TFSCHEMA_DATA=placeholder exec %q \"$@\"\n", schema, p.addr, plugin)
		if err := os.WriteFile(filepath.Join(dir, "terraform-provider-"+typ+"_v"+p.version), []byte(wrapper), 0o755); err != nil {
			return nil, err
		}
		includes = append(includes, fmt.Sprintf("%q", p.addr))
	}
	list := strings.Join(includes, ", ")
	cli := filepath.Join(work, "cli.tfrc")
	cfg := fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path    = %q\n    include = [%s]\n  }\n  direct {\n    exclude = [%s]\n  }\n}\n", filepath.Join(work, "mirror"), list, list)
	if err := os.WriteFile(cli, []byte(cfg), 0o644); err != nil {
		return nil, err
	}

	// A copy, so that init's lock files and data never land in the shared
	// working tree (other runs of tf-validate clean up after themselves there).
	tfdir := filepath.Join(work, "terraform")
	if err := copyTree(filepath.Join(root, "terraform"), tfdir); err != nil {
		return nil, err
	}
	if state != nil {
		if err := os.WriteFile(filepath.Join(tfdir, "terraform.tfstate"), state, 0o644); err != nil {
			return nil, err
		}
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, tf, append([]string{"-chdir=" + tfdir}, args...)...)
		env := []string{"TF_CLI_CONFIG_FILE=" + cli, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1", "TF_DATA_DIR=" + filepath.Join(work, "data")}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "TF_") {
				env = append(env, kv)
			}
		}
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("terraform %s: %v\n%s%s", args[0], err, out.String(), errOut.String())
		}
		return out.Bytes(), nil
	}
	if _, err := run("init", "-backend=false", "-input=false", "-no-color"); err != nil {
		return nil, err
	}
	planFile := filepath.Join(work, "plan")
	if _, err := run(append([]string{"plan", "-refresh=false", "-lock=false", "-input=false", "-no-color", "-out=" + planFile, "-var-file=terraform.tfvars.example"}, args...)...); err != nil {
		return nil, err
	}
	js, err := run("show", "-json", planFile)
	if err != nil {
		return nil, err
	}
	var p tfPlan
	if err := json.Unmarshal(js, &p); err != nil {
		return nil, fmt.Errorf("decode plan: %w", err)
	}
	return &p, nil
}

// copyTree copies the .tf files, the example variables and the files the
// modules read (file(): the forensics module's schemas and views' SQL) of
// src (no .terraform directories, no lock or state files).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if d.Name() == ".terraform" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !slices.ContainsFunc([]string{".tf", ".tfvars.example", ".avsc", ".json", ".sql"}, func(ext string) bool { return strings.HasSuffix(path, ext) }) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}
