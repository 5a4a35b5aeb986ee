package tfschema

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// TestValidateScript runs validate.sh, the script of `make tf-validate`
// (fmt, init and validate of every module, the offline plans and their IAM
// rules), as one test of the run: `make test` checks terraform/ this way,
// beside the other tests instead of after them all, and after this package's
// dependencies are compiled, so the script's builds only link. Its output
// is in the test log (go test -v, or .local/test/last.json of make test).
func TestValidateScript(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "terraform")
	script := filepath.Join(testenv.ModuleRoot(t), "tools", "tfschema", "validate.sh")
	// A bound for a loaded machine: the script plans three times.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	t.Logf("%s", out)
	// No schema file and no registry: the script checked fmt only, and says so.
	if strings.Contains(string(out), "tf-validate: SKIP") {
		t.Skip("validate.sh checked formatting only: no provider schema file and no Terraform registry")
	}
}
