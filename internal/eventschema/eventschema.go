// Package eventschema validates event JSON against docs/event.schema.json, the
// published contract of jsdlq.event.v1. Tests of every producer and consumer
// of events use it so that the Go types and the schema cannot drift apart.
package eventschema

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// RelPath is where the schema lives relative to the module root.
const RelPath = "docs/event.schema.json"

// Validator validates documents against the event schema.
type Validator struct{ schema *jsonschema.Schema }

// Load compiles the schema file at path, asserting formats (date-time).
func Load(path string) (*Validator, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("eventschema: open %s: %w", path, err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("eventschema: parse %s: %w", path, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.AssertContent()
	if err := c.AddResource("event.schema.json", doc); err != nil {
		return nil, fmt.Errorf("eventschema: add %s: %w", path, err)
	}
	s, err := c.Compile("event.schema.json")
	if err != nil {
		return nil, fmt.Errorf("eventschema: compile %s: %w", path, err)
	}
	return &Validator{schema: s}, nil
}

// FromModule finds the module root above the working directory (tests run in
// their package directory) and loads the schema there.
func FromModule() (*Validator, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("eventschema: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return Load(filepath.Join(dir, RelPath))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, errors.New("eventschema: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Validate checks one JSON document.
func (v *Validator) Validate(doc []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("eventschema: parse event: %w", err)
	}
	if err := v.schema.Validate(inst); err != nil {
		return fmt.Errorf("eventschema: %w", err)
	}
	return nil
}
