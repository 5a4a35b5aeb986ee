// Package forensics writes the change feed's rows (event.ChangeRow) from the
// store, for `dlqctl export`: the entries that died in a window, every
// transition of each (its history) as the row the feed published for it
// (store.ChangeRowOf), as NDJSON (the topic's JSON encoding, one row a line)
// or Parquet (the same columns). Memory stays bounded whatever the window
// holds: entries are read a page at a time and written before the next.
//
// A row from the export holds the entry's fields as they are at export
// time (a re-evaluation that changed an entry's category shows in its
// every row), where the feed's row holds them as they were at the move;
// and an entry's history keeps its last store.MaxHistory transitions.
package forensics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Formats of an export.
const (
	FormatNDJSON  = "ndjson"
	FormatParquet = "parquet"
)

// Formats are the formats Export writes.
var Formats = []string{FormatParquet, FormatNDJSON}

// ErrBadExport is an export asked for something it cannot do.
var ErrBadExport = errors.New("forensics: bad export")

// DefaultPageSize is how many entries one read of an export takes.
const DefaultPageSize = 200

// Source reads pages of entries (*store.Store).
type Source interface {
	Entries(ctx context.Context, q store.Query) (store.Page, error)
}

// RowWriter writes rows of the change feed.
type RowWriter interface {
	Write(rows []event.ChangeRow) error
	// Close flushes what is buffered; the underlying writer is the
	// caller's to close.
	Close() error
}

// NewWriter returns the writer of format onto w.
func NewWriter(format string, w io.Writer) (RowWriter, error) {
	switch format {
	case FormatNDJSON:
		return &ndjsonWriter{w: w}, nil
	case FormatParquet:
		return newParquetWriter(w), nil
	}
	return nil, fmt.Errorf("%w: format %q, want one of %v", ErrBadExport, format, Formats)
}

// Progress is told how far an export got: entries read, rows written.
type Progress func(entries, rows int64)

// Export is one export: the entries created in [Since, Until).
type Export struct {
	Since, Until time.Time
	// Tenant limits the export to one tenant's entries ("" for all).
	Tenant string
	// PageSize is how many entries one read takes (DefaultPageSize when
	// zero).
	PageSize int
	Progress Progress
}

// Result is what an export wrote.
type Result struct {
	Entries, Rows int64
}

// Run reads the window's entries from src, oldest first, and writes the
// rows of their transitions to w.
func (x Export) Run(ctx context.Context, src Source, w RowWriter) (Result, error) {
	var res Result
	if x.Since.IsZero() {
		return res, fmt.Errorf("%w: no start of the window (--since)", ErrBadExport)
	}
	if !x.Until.IsZero() && !x.Until.After(x.Since) {
		return res, fmt.Errorf("%w: the window ends (%s) before it starts (%s)", ErrBadExport,
			x.Until.UTC().Format(time.RFC3339), x.Since.UTC().Format(time.RFC3339))
	}
	size := x.PageSize
	if size <= 0 {
		size = DefaultPageSize
	}
	q := store.Query{Tenant: x.Tenant, CreatedFrom: x.Since, CreatedTo: x.Until, Order: store.OldestFirst, View: store.ExportView, Limit: size}
	for {
		page, err := src.Entries(ctx, q)
		if err != nil {
			return res, fmt.Errorf("forensics: read entries: %w", err)
		}
		rows := make([]event.ChangeRow, 0, 4*len(page.Entries))
		for _, e := range page.Entries {
			rows = append(rows, RowsOf(e)...)
		}
		if err := w.Write(rows); err != nil {
			return res, fmt.Errorf("forensics: write rows: %w", err)
		}
		res.Entries += int64(len(page.Entries))
		res.Rows += int64(len(rows))
		if x.Progress != nil {
			x.Progress(res.Entries, res.Rows)
		}
		if page.Next.IsZero() {
			return res, nil
		}
		q.After = page.Next
	}
}

// RowsOf are the rows of every transition e's history holds, oldest first.
func RowsOf(e *store.Entry) []event.ChangeRow {
	out := make([]event.ChangeRow, 0, len(e.History))
	for _, t := range e.History {
		out = append(out, store.ChangeRowOf(e, t))
	}
	return out
}

// ndjsonWriter writes rows as the topic carries them, one a line.
type ndjsonWriter struct{ w io.Writer }

func (n *ndjsonWriter) Write(rows []event.ChangeRow) error {
	var buf []byte
	for _, r := range rows {
		b, err := r.Encode()
		if err != nil {
			return err
		}
		buf = append(append(buf, b...), '\n')
	}
	_, err := n.w.Write(buf)
	return err
}

func (n *ndjsonWriter) Close() error { return nil }
