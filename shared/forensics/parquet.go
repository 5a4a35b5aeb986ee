package forensics

import (
	"fmt"
	"io"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/jsdlq/jsdlq/shared/event"
)

// The Parquet file's schema is made from event.ChangeColumns, as the
// topic's and the table's are: one required column per column, strings
// UTF-8, timestamps microseconds adjusted to UTC (what DuckDB and BigQuery
// read as a TIMESTAMP), zstd-compressed.

// parquetNode is the Parquet type of a column type.
func parquetNode(t event.ColumnType) parquet.Node {
	var n parquet.Node
	switch t {
	case event.ColString:
		n = parquet.String()
	case event.ColInt64:
		n = parquet.Int(64)
	case event.ColFloat64:
		n = parquet.Leaf(parquet.DoubleType)
	case event.ColTimestamp:
		n = parquet.Timestamp(parquet.Microsecond)
	default:
		panic(fmt.Sprintf("forensics: column type %s has no Parquet type", t))
	}
	return parquet.Compressed(n, &parquet.Zstd)
}

// ParquetSchema is the schema of the export's Parquet file.
func ParquetSchema() *parquet.Schema {
	g := parquet.Group{}
	for _, c := range event.ChangeColumns {
		g[c.Name] = parquetNode(c.Type)
	}
	return parquet.NewSchema("change", g)
}

// parquetValue is v, a column's value, as Parquet holds it.
func parquetValue(v any) parquet.Value {
	switch v := v.(type) {
	case string:
		return parquet.ByteArrayValue([]byte(v))
	case int64:
		return parquet.Int64Value(v)
	case float64:
		return parquet.DoubleValue(v)
	case time.Time:
		if v.IsZero() {
			return parquet.Int64Value(0)
		}
		return parquet.Int64Value(v.UnixMicro())
	}
	panic(fmt.Sprintf("forensics: a column's value of type %T", v))
}

// parquetWriter writes rows into one row group per page of the export.
type parquetWriter struct {
	w *parquet.GenericWriter[any]
	// index is each column's index in the schema (a group orders its
	// fields by name), in ChangeColumns' order.
	index []int
}

func newParquetWriter(w io.Writer) *parquetWriter {
	schema := ParquetSchema()
	pos := map[string]int{}
	for i, path := range schema.Columns() {
		pos[path[0]] = i
	}
	pw := &parquetWriter{w: parquet.NewGenericWriter[any](w, schema)}
	for _, c := range event.ChangeColumns {
		pw.index = append(pw.index, pos[c.Name])
	}
	return pw
}

func (p *parquetWriter) Write(rows []event.ChangeRow) error {
	if len(rows) == 0 {
		return nil
	}
	out := make([]parquet.Row, len(rows))
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return err
		}
		row := make(parquet.Row, len(event.ChangeColumns))
		for j, c := range event.ChangeColumns {
			col := p.index[j]
			row[col] = parquetValue(c.Value(&rows[i])).Level(0, 0, col)
		}
		out[i] = row
	}
	if _, err := p.w.WriteRows(out); err != nil {
		return err
	}
	// A row group per page: what is buffered is written out, so memory
	// holds one page whatever the window holds.
	return p.w.Flush()
}

func (p *parquetWriter) Close() error { return p.w.Close() }
