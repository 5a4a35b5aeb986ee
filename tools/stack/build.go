package stack

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Binary is a program a stack runs: its file name and the Go package it is
// built from.
type Binary struct{ Name, Pkg string }

// PipelineBinaries are the pipeline's programs that a private stack on free
// ports (the chaos tests, the load driver) builds and runs next to the
// gcloud emulators.
var PipelineBinaries = []Binary{
	{"nats-server", "github.com/nats-io/nats-server/v2"},
	{"cloudtasks-emulator", "./cmd/cloudtasks-emulator"},
	{"functions", "./cmd/functions"},
	{"bridge", "./cmd/bridge"},
}

// Build runs `go build -o out pkgs…` in the module at root; a failure
// carries the compiler's output.
func Build(ctx context.Context, root, out string, pkgs ...string) error {
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", out}, pkgs...)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, b)
	}
	return nil
}
