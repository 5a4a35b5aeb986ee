package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/store"
)

// A checkpoint's filter keeps the JSON names checkpoints on disk already
// use (since and until for the created_at range, not the store's field
// names), so a redrive saved by an earlier dlqctl resumes with its filter.
func TestCheckpointFilterFormat(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		json string
		want filter
	}{
		{"equalities", `{"tenant":"acme","status":"escalated","category":"transient","reason":"rate_limited","agent":"summarizer"}`,
			filter{store.BulkFilter{Tenant: "acme", Status: store.Escalated, Category: "transient", Reason: "rate_limited", Agent: "summarizer"}}},
		{"range", `{"since":"2026-01-02T03:04:05Z","until":"2026-01-03T03:04:05Z"}`,
			filter{store.BulkFilter{CreatedFrom: since, CreatedTo: since.Add(24 * time.Hour)}}},
		{"empty", `{}`, filter{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp.json")
			doc := `{"schema":"` + checkpointSchema + `","filter":` + tt.json + `,"rate_per_second":5,"by":"dlqctl:alice"}`
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			cp, err := loadCheckpoint(path)
			if err != nil {
				t.Fatalf("loadCheckpoint(%s) = %v", doc, err)
			}
			if diff := cmp.Diff(tt.want, cp.Filter); diff != "" {
				t.Errorf("loadCheckpoint(%s).Filter (-want +got):\n%s", doc, diff)
			}
			// Saved again, it reads the same: the names round-trip.
			w := &checkpointFile{path: path}
			if err := w.save(cp); err != nil {
				t.Fatal(err)
			}
			again, err := loadCheckpoint(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(cp.Filter, again.Filter); diff != "" {
				t.Errorf("filter after save and load (-want +got):\n%s", diff)
			}
		})
	}
}
