package deploycheck

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/tools/stack"
)

// The Go buildpack of Cloud Functions, as this test follows it: the zip's
// contents are moved into serverless_function_source_code; `go list -m`
// names the module; a main package is generated in
// functions.local/app inside that directory, importing the function's
// package (the module root, or <module>/<package name> when a directory of
// that name exists) for its init registrations and starting the functions
// framework; `go mod tidy`; `go build` of that main; the binary is started
// with FUNCTION_TARGET naming one registered function and PORT.
const (
	fnSourceDir = "serverless_function_source_code"
	appDir      = "functions.local/app"
)

// mainTemplate is the buildpack's template for functions that register
// themselves (functions.HTTP / functions.CloudEvent in init), but for the
// listen address: Start(port) is StartHostPort("", port), and the test binds
// loopback only.
var mainTemplate = template.Must(template.New("main").Parse(`// Binary main file implements an HTTP server that loads and runs user's code
// on incoming HTTP requests.
package main

import (
	"log"
	"net/http"
	"os"

	_ "{{.Package}}"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
)

func main() {
	http.HandleFunc("/robots.txt", http.NotFound)
	http.HandleFunc("/favicon.ico", http.NotFound)

	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if err := funcframework.StartHostPort("127.0.0.1", port); err != nil {
		log.Fatalf("Function failed to start: %v\n", err)
	}
}
`))

// registration is one function the deploy root registers in init.
type registration struct {
	Name      string
	Signature string // "http" or "cloudevent"
}

// registeredFunctions reads the functions.HTTP / functions.CloudEvent calls
// of the deploy root.
func registeredFunctions(t *testing.T, root string) (pkgName string, regs []registration) {
	t.Helper()
	fset := token.NewFileSet()
	matches, _ := filepath.Glob(filepath.Join(root, "*.go"))
	for _, file := range matches {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		pkgName = f.Name.Name
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "functions" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			switch sel.Sel.Name {
			case "HTTP":
				regs = append(regs, registration{name, "http"})
			case "CloudEvent":
				regs = append(regs, registration{name, "cloudevent"})
			}
			return true
		})
	}
	if len(regs) == 0 {
		t.Fatalf("no functions.HTTP / functions.CloudEvent registration in %s/*.go", root)
	}
	return pkgName, regs
}

// TestBuildpackBuild builds the function source bundle as Cloud Functions
// does and serves each registered function from it once: the zip Terraform's
// archive makes (its excludes read from the plan), the Go buildpack's
// generated main, the Go toolchain of Terraform's runtime, FUNCTION_TARGET.
// Without configuration each function must answer with its configuration
// error (500, and the log names the invalid environment), which proves
// that the bundle compiles without the excluded directories, registers the
// target under its name, and reaches the function's code.
func TestBuildpackBuild(t *testing.T) {
	t.Parallel()
	root := testenv.ModuleRoot(t)
	start := time.Now()
	p := offlinePlan(t)
	step := func(what string) {
		t.Logf("%-40s %6.1fs", what, time.Since(start).Seconds())
		start = time.Now()
	}
	step("offline plan (shared with the index test)")

	var excludes []string
	for _, r := range p.resources("archive_file") {
		if r.Mode == "data" && strings.HasSuffix(r.Address, "module.source.data.archive_file.source") {
			for _, e := range r.Values["excludes"].([]any) {
				excludes = append(excludes, e.(string))
			}
		}
	}
	if len(excludes) == 0 {
		t.Fatal("the plan has no excludes on module.source's archive_file; the bundle would hold the whole repository")
	}
	runtimes := map[string]bool{}
	deployed := map[string]bool{}
	for _, r := range p.resources("google_cloudfunctions2_function") {
		for _, bc := range r.Values["build_config"].([]any) {
			m := bc.(map[string]any)
			runtimes[str(m["runtime"])] = true
			deployed[str(m["entry_point"])] = true
		}
	}
	if len(runtimes) != 1 {
		t.Fatalf("functions deploy with runtimes %v, want exactly one", keys(runtimes))
	}
	runtime := keys(runtimes)[0]

	pkgName, regs := registeredFunctions(t, root)
	registered := map[string]bool{}
	for _, r := range regs {
		registered[r.Name] = true
	}
	for ep := range deployed {
		if !registered[ep] {
			t.Errorf("Terraform deploys entry point %q, which %s/*.go does not register: the deployed function would not start", ep, filepath.Base(root))
		}
	}
	for _, r := range regs {
		if !deployed[r.Name] {
			t.Logf("note: %s is registered but no google_cloudfunctions2_function deploys it (yet)", r.Name)
		}
	}

	work := t.TempDir()
	bundle, files, large := zipSource(t, root, excludes)
	t.Logf("bundle: %d files, %d bytes; excludes %q", files, len(bundle), excludes)
	for _, l := range large {
		t.Logf("WARNING: the bundle holds %s, not source: Terraform would upload it too (a build output left in the tree?)", l)
	}
	src := filepath.Join(work, fnSourceDir)
	unzip(t, bundle, src)
	step("zip with Terraform's excludes, unzip")

	gobin, note := toolchainFor(t, runtime)
	t.Logf("toolchain: %s", note)
	goEnv := append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	run := func(dir string, args ...string) string {
		t.Helper()
		// Generous: on a cold build cache the build compiles the bundle's
		// whole dependency tree.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, gobin, args...)
		cmd.Dir, cmd.Env = dir, goEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s (in the bundle): %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}

	mod := run(src, "list", "-m")
	importPath := mod
	if fi, err := os.Stat(filepath.Join(src, pkgName)); err == nil && fi.IsDir() {
		importPath = mod + "/" + pkgName // what the buildpack would import; registrations must be there
	}
	if strings.Contains(importPath, "/"+pkgName) && importPath != mod {
		t.Errorf("the bundle has a directory %q: the buildpack would import %s instead of the module root %s", pkgName, importPath, mod)
	}
	var mainSrc bytes.Buffer
	if err := mainTemplate.Execute(&mainSrc, map[string]string{"Package": importPath}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, appDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, appDir, "main.go"), mainSrc.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run(src, "mod", "tidy")
	step("go mod tidy")
	bin := filepath.Join(work, "main")
	// Built with the flags `go test` builds with (no -trimpath), so the
	// dependencies come from the build cache the test binaries filled: a
	// fresh clone compiles them once, not twice. Only the bundle's own
	// packages compile here, in their new directory.
	run(src, "build", "-o", bin, "./"+appDir)
	step("go build (generated main)")

	var wg sync.WaitGroup
	for _, r := range regs {
		wg.Go(func() { serveOnce(t, bin, r) })
	}
	wg.Wait()
	step("serve each function once")
}

// serveOnce starts the built binary for one function, calls it once and
// stops it. A free port can be taken by another process between the probe
// and the binary's bind; such an attempt (the binary exits, or the
// connection fails) is made again on a new port, up to three times, so only
// a failure that repeats is reported.
func serveOnce(t *testing.T, bin string, r registration) {
	var err error
	for range 3 {
		var transient bool
		if transient, err = serveAttempt(bin, r); err == nil {
			t.Logf("%s (%s): 500, the configuration error logged", r.Name, r.Signature)
			return
		} else if !transient {
			break
		}
	}
	t.Errorf("%s: %v", r.Name, err)
}

// serveAttempt reports whether a failure may be a lost port race.
func serveAttempt(bin string, r registration) (transient bool, err error) {
	addr, err := stack.FreeAddr()
	if err != nil {
		return true, err
	}
	_, port, _ := net.SplitHostPort(addr)
	var out testenv.LogBuffer
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir(),
		"PORT=" + port, "FUNCTION_TARGET=" + r.Name, "FUNCTION_SIGNATURE_TYPE=" + r.Signature,
		"K_SERVICE=" + strings.ToLower(r.Name), "K_REVISION=" + strings.ToLower(r.Name) + "-00001", "K_CONFIGURATION=" + strings.ToLower(r.Name),
	}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("start: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			return strings.Contains(out.String(), "address already in use"), fmt.Errorf("exited before listening on %s; output:\n%s", addr, out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("not listening on %s after 30s; output:\n%s", addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	body := `{}`
	if r.Signature == "cloudevent" {
		body = `{"message":{"data":"e30=","messageId":"1"},"subscription":"projects/p/subscriptions/s"}`
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if r.Signature == "cloudevent" {
		// A Pub/Sub CloudEvent in binary mode, as Eventarc delivers it.
		req.Header.Set("Ce-Id", "deploycheck-1")
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Type", "google.cloud.pubsub.topic.v1.messagePublished")
		req.Header.Set("Ce-Source", "//pubsub.googleapis.com/projects/p/topics/dlq-events")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return true, fmt.Errorf("call: %w; output:\n%s", err, out.String())
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The log line is written before the response; a short grace for the
	// pipe only.
	waitUntil(2*time.Second, func() bool { return strings.Contains(out.String(), "config: invalid environment") })
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(out.String(), "config: invalid environment") {
		return false, fmt.Errorf("without configuration = %d %q, want 500 and the configuration error in the log; output:\n%s", resp.StatusCode, answer, out.String())
	}
	return false, nil
}

func waitUntil(d time.Duration, cond func() bool) {
	for end := time.Now().Add(d); !cond() && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
}

// zipSource zips root as the archive provider does: walk the tree, skip a
// directory or file whose relative path matches an exclude (doublestar
// patterns: ** spans any number of path segments), follow symlinks.
// It also lists the files over 1 MiB: a function's source has none.
func zipSource(t *testing.T, root string, excludes []string) ([]byte, int, []string) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	n := 0
	var large []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		excluded := slices.ContainsFunc(excludes, func(ex string) bool { return globMatch(ex, rel) })
		if d.IsDir() {
			if excluded && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if excluded {
			return nil
		}
		info, err := os.Stat(p) // follows a symlink, as the provider does
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// Stored, not deflated: the files are what matters, and a stray
		// build output would otherwise cost seconds of compression.
		w, err := zw.CreateHeader(&zip.FileHeader{Name: rel, Method: zip.Store})
		if err != nil {
			return err
		}
		n++
		if len(b) > 1<<20 {
			large = append(large, fmt.Sprintf("%s (%d bytes)", rel, len(b)))
		}
		_, err = w.Write(b)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatalf("zip %s: %v", root, err)
	}
	return buf.Bytes(), n, large
}

// globMatch is doublestar's PathMatch for the patterns Terraform's excludes
// use: segments matched with path.Match, ** matching zero or more of them.
func globMatch(pattern, name string) bool {
	var match func(p, n []string) bool
	match = func(p, n []string) bool {
		if len(p) == 0 {
			return len(n) == 0
		}
		if p[0] == "**" {
			for i := 0; i <= len(n); i++ {
				if match(p[1:], n[i:]) {
					return true
				}
			}
			return false
		}
		if len(n) == 0 {
			return false
		}
		if ok, err := path.Match(p[0], n[0]); err != nil || !ok {
			return false
		}
		return match(p[1:], n[1:])
	}
	return match(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func unzip(t *testing.T, b []byte, dst string) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		out := filepath.Join(dst, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var runtimeRE = regexp.MustCompile(`^go1(\d+)$`)

// toolchainFor returns the go command for a Cloud Functions runtime id
// (go126: Go 1.26, whose newest patch the buildpack installs) and says which
// it is. The local toolchain serves when it is of that minor version;
// otherwise the toolchain is fetched through GOTOOLCHAIN (the module proxy),
// and when that fails too the local one is used, loudly.
func toolchainFor(t *testing.T, runtime string) (string, string) {
	t.Helper()
	m := runtimeRE.FindStringSubmatch(runtime)
	if m == nil {
		t.Fatalf("runtime %q is not a Go runtime id like go126", runtime)
	}
	want := "go1." + m[1]
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatalf("go env GOVERSION: %v", err)
	}
	local := strings.TrimSpace(string(out))
	if local == want || strings.HasPrefix(local, want+".") {
		return "go", fmt.Sprintf("runtime %s is Go %s; the local %s is of that line (the buildpack installs its newest patch)", runtime, strings.TrimPrefix(want, "go"), local)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "go")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nGOTOOLCHAIN="+want+".0 exec go \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if v, err := exec.Command(script, "env", "GOVERSION").Output(); err == nil && strings.HasPrefix(strings.TrimSpace(string(v)), want) {
		return script, fmt.Sprintf("runtime %s is Go %s; fetched %s (the local go is %s)", runtime, strings.TrimPrefix(want, "go"), strings.TrimSpace(string(v)), local)
	}
	t.Logf("WARNING: runtime %s wants Go %s, which could not be fetched here; building with the local %s instead", runtime, strings.TrimPrefix(want, "go"), local)
	return "go", fmt.Sprintf("runtime %s wants %s: NOT AVAILABLE, using the local %s", runtime, want, local)
}
