// Package tsagent prepares the TypeScript agentkit (clients/typescript,
// npm @jsdlq/agentkit) for the processes that run it on this machine: the
// demo fleet's TypeScript agent and the tests of internal/kitcompat (its own
// npm tests and the cross-language comparison with the Go kit).
package tsagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Dir is the package's directory relative to the repository root.
const Dir = "clients/typescript"

// AgentScript is the example agent relative to the package directory
// (compiled from examples/agent.ts).
const AgentScript = "dist/examples/agent.js"

// CompatScript is the cross-language driver relative to the package
// directory (compiled from tools/compat.ts).
const CompatScript = "dist/tools/compat.js"

// stamp, inside node_modules, holds the digest of the package-lock.json
// node_modules was installed from.
const stamp = "node_modules/.jsdlq-installed-lock"

// Prepare installs the package's locked dependencies with npm ci (skipped
// when node_modules was installed from the same package-lock.json) and
// compiles it (npm run build; skipped when dist was compiled from the same
// sources). A lock file serialises concurrent callers (a
// demo and a test run at once would otherwise install over each other).
// npm's output goes to out; the error carries its tail. It returns the
// package directory.
func Prepare(ctx context.Context, root string, out io.Writer) (string, error) {
	dir := filepath.Join(root, Dir)
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("tsagent: npm not found (Node.js 20 or later is needed for the TypeScript agentkit): %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".prepare.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("tsagent: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("tsagent: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	lockfile, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", fmt.Errorf("tsagent: %w", err)
	}
	sum := sha256.Sum256(lockfile)
	want := hex.EncodeToString(sum[:])
	if got, err := os.ReadFile(filepath.Join(dir, stamp)); err != nil || string(got) != want {
		if err := npm(ctx, dir, out, "ci", "--no-audit", "--no-fund"); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, stamp), []byte(want), 0o644); err != nil {
			return "", fmt.Errorf("tsagent: %w", err)
		}
	}
	// tsc takes seconds even when nothing changed: the build is skipped
	// when dist was compiled from the same sources (and lockfile).
	sources, err := sourcesDigest(dir, want)
	if err != nil {
		return "", err
	}
	if got, err := os.ReadFile(filepath.Join(dir, builtStamp)); err == nil && string(got) == sources && exists(filepath.Join(dir, AgentScript)) && exists(filepath.Join(dir, CompatScript)) {
		return dir, nil
	}
	if err := npm(ctx, dir, out, "run", "build"); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, builtStamp), []byte(sources), 0o644); err != nil {
		return "", fmt.Errorf("tsagent: %w", err)
	}
	return dir, nil
}

// builtStamp, inside dist, holds the digest of the sources dist was
// compiled from (sourcesDigest).
const builtStamp = "dist/.jsdlq-built"

// compiled are what tsconfig.json compiles (its include) and configures.
var compiled = []string{"tsconfig.json", "package.json", "src", "test", "testkit", "tools", "examples"}

// sourcesDigest is a digest of every file tsc compiles, by path and
// content, and of the lockfile's digest lock.
func sourcesDigest(dir, lock string) (string, error) {
	h := sha256.New()
	h.Write([]byte(lock))
	for _, top := range compiled {
		err := filepath.WalkDir(filepath.Join(dir, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
			h.Write(b)
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("tsagent: digest the sources: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func npm(ctx context.Context, dir string, out io.Writer, args ...string) error {
	var tail bytes.Buffer
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	cmd.Stdout = io.MultiWriter(out, &tail)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		b := tail.Bytes()
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return errors.Join(fmt.Errorf("tsagent: npm %v in %s: %w", args, dir, err), errors.New(string(b)))
	}
	return nil
}
