package kitcompat

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/tools/tsagent"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var prepared struct {
	once sync.Once
	dir  string
	err  error
}

// prepare installs (npm ci) and compiles the TypeScript package, once for
// the tests of this binary: compiling takes most of a core for seconds.
func prepare(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, "npm and the TypeScript agentkit")
	prepared.once.Do(func() {
		var out bytes.Buffer
		prepared.dir, prepared.err = tsagent.Prepare(testenv.Context(t), testenv.ModuleRoot(t), &out)
	})
	if prepared.err != nil {
		t.Fatalf("prepare the TypeScript agentkit: %v", prepared.err)
	}
	return prepared.dir
}

// TestTypeScriptPackage runs the TypeScript agentkit's own tests (npm test)
// against a nats-server with JetStream and the Firestore emulator started
// here on free loopback ports, as `make test` runs every other test.
func TestTypeScriptPackage(t *testing.T) {
	t.Parallel()
	dir := prepare(t)
	n := testenv.NewNATS(t)
	// prepare compiled the package: its tests run on that build (npm test
	// would compile again).
	cmd := exec.CommandContext(testenv.Context(t), "npm", "run", "test:built")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL="+n.URL, "FIRESTORE_EMULATOR_HOST="+testenv.FirestoreHost(t))
	// When the context ends, npm is killed but a node it started may hold
	// the output open: stop waiting for it after a while.
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("npm test in %s failed (%v):\n%s", dir, err, out)
	}
	if err != nil {
		t.Fatalf("npm test: %v", err)
	}
	// node --test ends with its counts ("# pass 17", "# fail 0"): a run
	// that found no tests is a failure too.
	var pass string
	for _, l := range strings.Split(string(out), "\n") {
		if c, ok := strings.CutPrefix(l, "# pass "); ok {
			pass = c
		}
	}
	if pass == "" || pass == "0" {
		t.Fatalf("npm test ran no tests:\n%s", out)
	}
	t.Logf("npm test: %s TypeScript tests passed", pass)
}
