// Command testreport reads `go test -json` on its standard input, prints
// what plain `go test` would have printed, and ends with the slowest tests
// and packages of the run and its test counts, so that a slow new test or a
// lost one shows in every `make test`:
//
//	set -o pipefail; go test -json ./... | go run ./internal/testreport
//
// It exits 0 whatever the tests did (the pipeline's status, with pipefail,
// is go test's own), and 2 only when it cannot read its input or write the
// copy -json asks for. It is test tooling: no deployed binary links it.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	top := flag.Int("top", 10, "how many of the slowest tests and packages to list")
	raw := flag.String("json", "", "also write the raw events to this file (for a closer look afterwards)")
	flag.Parse()

	in := io.Reader(os.Stdin)
	if *raw != "" {
		if err := os.MkdirAll(filepath.Dir(*raw), 0o755); err != nil {
			fatal(err)
		}
		f, err := os.Create(*raw)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		in = io.TeeReader(os.Stdin, f)
	}
	sum, err := Report(in, os.Stdout)
	sum.WriteSlowest(os.Stdout, *top)
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testreport:", err)
	os.Exit(2)
}
