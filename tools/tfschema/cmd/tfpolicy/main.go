// Command tfpolicy checks a Terraform plan against the IAM rules of
// terraform/README.md (no public principals; project-level roles only
// logging.logWriter, monitoring.metricWriter and those the README lists
// with a reason). tools/tfschema/validate.sh runs it:
//
//	terraform show -json PLANFILE | tfpolicy -readme terraform/README.md
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/jsdlq/jsdlq/tools/tfschema"
)

func main() {
	readmePath := flag.String("readme", "terraform/README.md", "README whose roles table lists the allowed project-level roles")
	flag.Parse()
	if err := run(*readmePath, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tfpolicy:", err)
		os.Exit(1)
	}
}

func run(readmePath string, plan io.Reader, out io.Writer) error {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return fmt.Errorf("read README: %w", err)
	}
	data, err := io.ReadAll(plan)
	if err != nil {
		return fmt.Errorf("read plan: %w", err)
	}
	violations, err := tfschema.CheckPlan(data, string(readme))
	if err != nil {
		return err
	}
	for _, v := range violations {
		fmt.Fprintln(out, "  "+v.String())
	}
	if len(violations) > 0 {
		return fmt.Errorf("%d IAM rule violation(s)", len(violations))
	}
	return nil
}
