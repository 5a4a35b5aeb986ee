package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// builds are the binaries this test binary built, by package: each is built
// once however many tests ask (a link of a binary that uses the cloud
// clients costs seconds of a core), into binDir, which StopAll removes.
var (
	builds   = map[string]*build{}
	binDir   string
	binDirMu sync.Mutex
)

type build struct {
	once sync.Once
	path string
	err  error
}

// BuildOnce builds the main package pkg (an import path, or a path relative
// to the module root such as "./cmd/dlqctl") with `go build` and returns the
// executable's path; every later call for pkg returns the same file. The go
// command is the one running the tests (go test puts it first on PATH); the
// build uses go test's flags, so the dependencies come from the build cache.
// It is for helpers without a test at hand; tests call Binary.
func BuildOnce(pkg string) (string, error) {
	mu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = goBuild(pkg) })
	return b.path, b.err
}

// Binary is BuildOnce that fails the test when the build fails. Under
// -short it skips the test.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	SkipShort(t, "a build of "+pkg)
	p, err := BuildOnce(pkg)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

func goBuild(pkg string) (string, error) {
	dir, err := builtDir()
	if err != nil {
		return "", err
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	// A directory per package: two packages may end in the same name.
	out := filepath.Join(dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg), commandName(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// commandName is the name go build gives pkg's executable: the last
// element of its path, a major version suffix (/v2) left out.
func commandName(pkg string) string {
	name := path.Base(pkg)
	if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" && path.Dir(pkg) != "." {
		name = path.Base(path.Dir(pkg))
	}
	return name
}

func builtDir() (string, error) {
	binDirMu.Lock()
	defer binDirMu.Unlock()
	if binDir == "" {
		d, err := os.MkdirTemp("", "jsdlq-testbin-")
		if err != nil {
			return "", fmt.Errorf("testenv: %w", err)
		}
		binDir = d
	}
	return binDir, nil
}

// removeBuilt removes what BuildOnce built; StopAll calls it.
func removeBuilt() {
	binDirMu.Lock()
	defer binDirMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
		binDir = ""
	}
}
