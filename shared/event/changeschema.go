package event

import (
	"encoding/json"
	"fmt"
)

// The change feed's schemas, made from ChangeColumns: the Pub/Sub topic's
// Avro schema and the BigQuery table's. Terraform reads them from
// terraform/modules/forensics (change.avsc, table_schema.json); a test
// holds those files equal to these.

// avroTypes are the Avro types of the column types: a timestamp is a long
// of microseconds (timestamp-micros), which a BigQuery subscription writes
// into a TIMESTAMP column.
var avroTypes = map[ColumnType]any{
	ColString:    "string",
	ColInt64:     "long",
	ColFloat64:   "double",
	ColTimestamp: map[string]string{"type": "long", "logicalType": "timestamp-micros"},
}

// avroDefaults are the columns' defaults (every column is required, and
// has one, so the schema can evolve by adding columns).
var avroDefaults = map[ColumnType]any{ColString: "", ColInt64: 0, ColFloat64: 0.0, ColTimestamp: 0}

// AvroField is one field of an Avro record schema.
type AvroField struct {
	Name    string `json:"name"`
	Type    any    `json:"type"`
	Doc     string `json:"doc,omitempty"`
	Default any    `json:"default"`
}

// AvroRecord is an Avro record schema.
type AvroRecord struct {
	Type      string      `json:"type"`
	Name      string      `json:"name"`
	Namespace string      `json:"namespace"`
	Doc       string      `json:"doc"`
	Fields    []AvroField `json:"fields"`
}

// AvroSchema is the topic's schema (Avro, JSON encoding on the wire).
func AvroSchema() AvroRecord {
	r := AvroRecord{Type: "record", Name: "change", Namespace: "jsdlq.v1",
		Doc: "One transition of a jsdlq failure-log entry (" + ChangeSchema + ")."}
	for _, c := range ChangeColumns {
		r.Fields = append(r.Fields, AvroField{Name: c.Name, Type: avroTypes[c.Type], Doc: c.Doc, Default: avroDefaults[c.Type]})
	}
	return r
}

// BigQueryField is one column of a BigQuery table schema, as Terraform's
// google_bigquery_table takes it.
type BigQueryField struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Mode        string `json:"mode"`
	Description string `json:"description,omitempty"`
}

// BigQuerySchema is the warehouse table's schema: every column REQUIRED,
// as every field of the topic's schema is.
func BigQuerySchema() []BigQueryField {
	var out []BigQueryField
	for _, c := range ChangeColumns {
		out = append(out, BigQueryField{Name: c.Name, Type: string(c.Type), Mode: "REQUIRED", Description: c.Doc})
	}
	return out
}

// SchemaFile is a schema as its file holds it: indented JSON and a newline.
func SchemaFile(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("event: encode schema: %w", err)
	}
	return append(b, '\n'), nil
}
