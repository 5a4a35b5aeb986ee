package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jsdlq/jsdlq/shared/forensics"
)

// cmdExport writes the change feed's rows of the entries that died in a
// window, from the store, as Parquet or NDJSON (docs/forensics.md): to
// --out (written whole or not at all: a temporary file renamed at the end)
// or to stdout, with its progress on stderr.
func (a *app) cmdExport(ctx context.Context, args []string) error {
	fs := newFlags("export")
	since := fs.String("since", "", "the window's start: RFC 3339 or a duration back from now (required)")
	until := fs.String("until", "", "the window's end (default: now)")
	format := fs.String("format", forensics.FormatParquet, "parquet or ndjson")
	out := fs.String("out", "", "the file to write (default: stdout)")
	page := fs.Int("page", forensics.DefaultPageSize, "entries per read (1-1000)")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if !slices.Contains(forensics.Formats, *format) {
		return usagef("--format %q: must be one of %v", *format, forensics.Formats)
	}
	if *since == "" {
		return usagef("export needs --since")
	}
	if *page < 1 || *page > 1000 {
		return usagef("--page %d: must be 1-1000", *page)
	}
	x := forensics.Export{Tenant: a.scope, PageSize: *page}
	var err error
	if x.Since, err = parseTime(*since, a.clock()); err != nil {
		return err
	}
	if *until != "" {
		if x.Until, err = parseTime(*until, a.clock()); err != nil {
			return err
		}
		if !x.Until.After(x.Since) {
			return usagef("--until %s is not after --since %s", x.Until.Format(time.RFC3339), x.Since.Format(time.RFC3339))
		}
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	x.Progress = func(entries, rows int64) {
		fmt.Fprintf(a.stderr, "dlqctl export: %d entries, %d rows\n", entries, rows)
	}
	dst, commit, err := a.exportTarget(*out)
	if err != nil {
		return err
	}
	w, err := forensics.NewWriter(*format, dst)
	if err != nil {
		return errors.Join(err, commit(false))
	}
	res, err := x.Run(ctx, st, w)
	if err == nil {
		err = w.Close()
	}
	if cerr := commit(err == nil); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "dlqctl export: done: %d entries, %d rows (%s)\n", res.Entries, res.Rows, *format)
	return nil
}

// exportTarget is where the export writes: stdout, or a temporary file
// beside path that commit(true) renames to path and commit(false) removes.
func (a *app) exportTarget(path string) (io.Writer, func(ok bool) error, error) {
	if path == "" {
		return a.stdout, func(bool) error { return nil }, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, nil, fmt.Errorf("export: %w", err)
	}
	return f, func(ok bool) error {
		cerr := f.Close()
		if !ok || cerr != nil {
			os.Remove(f.Name())
			return cerr
		}
		if err := os.Rename(f.Name(), path); err != nil {
			os.Remove(f.Name())
			return fmt.Errorf("export: %w", err)
		}
		return nil
	}, nil
}
