// Package changeschema checks the change feed's messages and schemas as
// Pub/Sub and BigQuery would, from the files Terraform deploys
// (terraform/modules/forensics/change.avsc and table_schema.json), not from
// the Go code that made them: a message against the topic's Avro schema in
// its JSON encoding, and the topic's schema against the table's by the
// rules of a BigQuery subscription that uses the topic schema (names,
// types, modes). Test code only.
package changeschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Files of the forensics module, relative to the repository's root.
const (
	AvroFile  = "terraform/modules/forensics/change.avsc"
	TableFile = "terraform/modules/forensics/table_schema.json"
)

// Field is an Avro record field as the schema file holds it.
type Field struct {
	Name    string          `json:"name"`
	Type    json.RawMessage `json:"type"`
	Default json.RawMessage `json:"default"`
}

// Schema is the topic's Avro record schema.
type Schema struct {
	Type   string  `json:"type"`
	Name   string  `json:"name"`
	Fields []Field `json:"fields"`
}

// Column is a column of the table's schema file.
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Mode string `json:"mode"`
}

// Load reads the two schema files under root.
func Load(root string) (Schema, []Column, error) {
	var s Schema
	var cols []Column
	for path, v := range map[string]any{AvroFile: &s, TableFile: &cols} {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return Schema{}, nil, fmt.Errorf("changeschema: %w", err)
		}
		d := json.NewDecoder(bytes.NewReader(b))
		if err := d.Decode(v); err != nil {
			return Schema{}, nil, fmt.Errorf("changeschema: %s: %w", path, err)
		}
	}
	if s.Type != "record" || len(s.Fields) == 0 {
		return Schema{}, nil, fmt.Errorf("changeschema: %s is not a record schema with fields", AvroFile)
	}
	return s, cols, nil
}

// avroType is a field's type: a primitive name and its logical type.
type avroType struct{ primitive, logical string }

// typeOf reads a field's type; a union (an array) is refused: the feed's
// fields are all required.
func typeOf(f Field) (avroType, error) {
	var name string
	if err := json.Unmarshal(f.Type, &name); err == nil {
		return avroType{primitive: name}, nil
	}
	var complexType struct {
		Type        string `json:"type"`
		LogicalType string `json:"logicalType"`
	}
	if err := json.Unmarshal(f.Type, &complexType); err != nil {
		return avroType{}, fmt.Errorf("field %s: type %s is neither a primitive nor a logical type (a union?)", f.Name, f.Type)
	}
	return avroType{primitive: complexType.Type, logical: complexType.LogicalType}, nil
}

// CheckMessage checks data, one message, against s in Avro's JSON
// encoding: an object with exactly the schema's fields, each of its type
// (a long an integer within 64 bits, a double a number, a string a string).
func CheckMessage(s Schema, data []byte) error {
	var obj map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	var errs []error
	for _, f := range s.Fields {
		raw, ok := obj[f.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("field %s missing", f.Name))
			continue
		}
		delete(obj, f.Name)
		t, err := typeOf(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkValue(t, raw); err != nil {
			errs = append(errs, fmt.Errorf("field %s: %w", f.Name, err))
		}
	}
	for k := range obj {
		errs = append(errs, fmt.Errorf("field %s is not in the schema", k))
	}
	return errors.Join(errs...)
}

func checkValue(t avroType, raw json.RawMessage) error {
	switch t.primitive {
	case "string":
		var s string
		return json.Unmarshal(raw, &s)
	case "long", "int":
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return err
		}
		if _, err := n.Int64(); err != nil {
			return fmt.Errorf("%s is not a %s: %w", raw, t.primitive, err)
		}
		return nil
	case "double", "float":
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || math.IsNaN(f) {
			return fmt.Errorf("%s is not a %s", raw, t.primitive)
		}
		return nil
	case "boolean":
		var b bool
		return json.Unmarshal(raw, &b)
	}
	return fmt.Errorf("type %s is not one this checker knows", t.primitive)
}

// bigQueryTypes are the column types a BigQuery subscription writes an
// Avro type into (Pub/Sub's "schema compatibility" table for Avro).
var bigQueryTypes = map[avroType][]string{
	{primitive: "string"}:                                  {"STRING", "JSON"},
	{primitive: "long"}:                                    {"INT64", "INTEGER", "NUMERIC", "BIGNUMERIC"},
	{primitive: "int"}:                                     {"INT64", "INTEGER", "NUMERIC", "BIGNUMERIC"},
	{primitive: "double"}:                                  {"FLOAT64", "FLOAT", "NUMERIC", "BIGNUMERIC"},
	{primitive: "float"}:                                   {"FLOAT64", "FLOAT", "NUMERIC", "BIGNUMERIC"},
	{primitive: "boolean"}:                                 {"BOOL", "BOOLEAN"},
	{primitive: "long", logical: "timestamp-micros"}:       {"TIMESTAMP", "INT64", "INTEGER"},
	{primitive: "long", logical: "timestamp-millis"}:       {"TIMESTAMP", "INT64", "INTEGER"},
	{primitive: "int", logical: "date"}:                    {"DATE", "INT64", "INTEGER"},
	{primitive: "long", logical: "local-timestamp-micros"}: {"DATETIME", "INT64", "INTEGER"},
}

// Compatible checks the topic's schema s against the table's columns by
// the rules of a BigQuery subscription that writes with the topic schema:
// every field has a column of the same name and a type it is written into;
// a required field (no union with null) a REQUIRED or NULLABLE column, never
// REPEATED; a column no field fills must be NULLABLE.
func Compatible(s Schema, cols []Column) error {
	byName := map[string]Column{}
	for _, c := range cols {
		byName[c.Name] = c
	}
	var errs []error
	for _, f := range s.Fields {
		c, ok := byName[f.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("field %s has no column", f.Name))
			continue
		}
		delete(byName, f.Name)
		t, err := typeOf(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		want, known := bigQueryTypes[t]
		if !known {
			errs = append(errs, fmt.Errorf("field %s: no BigQuery type takes Avro %s/%s", f.Name, t.primitive, t.logical))
		} else if !contains(want, c.Type) {
			errs = append(errs, fmt.Errorf("field %s: Avro %s/%s cannot be written into %s (one of %v)", f.Name, t.primitive, t.logical, c.Type, want))
		}
		if c.Mode != "REQUIRED" && c.Mode != "NULLABLE" {
			errs = append(errs, fmt.Errorf("column %s: mode %q, want REQUIRED or NULLABLE for a required field", c.Name, c.Mode))
		}
	}
	for _, c := range byName {
		if c.Mode != "NULLABLE" {
			errs = append(errs, fmt.Errorf("column %s: no field fills it, so it must be NULLABLE, not %q", c.Name, c.Mode))
		}
	}
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
