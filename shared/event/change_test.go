package event_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/changeschema"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

var updateSchemas = flag.Bool("update-schemas", false, "rewrite the change feed's schema files from event.ChangeColumns")

// TestChangeSchemaFiles holds the files Terraform deploys (the topic's Avro
// schema, the table's schema) equal to what ChangeColumns makes: the
// columns are the one source, the files its copies for Terraform.
func TestChangeSchemaFiles(t *testing.T) {
	root := testenv.ModuleRoot(t)
	for path, v := range map[string]any{changeschema.AvroFile: event.AvroSchema(), changeschema.TableFile: event.BigQuerySchema()} {
		want, err := event.SchemaFile(v)
		if err != nil {
			t.Fatal(err)
		}
		full := filepath.Join(root, path)
		if *updateSchemas {
			if err := os.WriteFile(full, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(full)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from event.ChangeColumns (go test ./shared/event -run TestChangeSchemaFiles -update-schemas): %s", path, cmp.Diff(string(want), string(got)))
		}
	}
}

// TestChangeTopicFitsTable checks the topic's schema against the table's by
// the rules of a BigQuery subscription (names, types, modes).
func TestChangeTopicFitsTable(t *testing.T) {
	s, cols, err := changeschema.Load(testenv.ModuleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := changeschema.Compatible(s, cols); err != nil {
		t.Errorf("Compatible(change.avsc, table_schema.json) = %v, want nil", err)
	}
	// The rules themselves: a table that drops, retypes or repeats a
	// column, or adds a required one, is refused.
	for name, edit := range map[string]func([]changeschema.Column) []changeschema.Column{
		"dropped column": func(c []changeschema.Column) []changeschema.Column { return c[1:] },
		"retyped column": func(c []changeschema.Column) []changeschema.Column { c[0].Type = "INT64"; return c },
		"repeated mode":  func(c []changeschema.Column) []changeschema.Column { c[0].Mode = "REPEATED"; return c },
		"extra required": func(c []changeschema.Column) []changeschema.Column {
			return append(c, changeschema.Column{Name: "extra", Type: "STRING", Mode: "REQUIRED"})
		},
	} {
		bad := edit(append([]changeschema.Column(nil), cols...))
		if err := changeschema.Compatible(s, bad); err == nil {
			t.Errorf("Compatible(%s) = nil, want an error", name)
		}
	}
}

func sampleRow() event.ChangeRow {
	at := time.Date(2026, 11, 21, 10, 5, 0, 123456000, time.UTC)
	r := event.NewChangeRow("TASKS.42", "scheduled", "replaying", at)
	r.Tenant, r.Agent, r.TaskType, r.Stream = "acme", "backend", "code_review", "TASKS"
	r.ReasonCode, r.Category, r.Action, r.Strategy = "rate_limited", "transient", "auto_replay", "backoff"
	r.Transition = event.ChangeClaimed
	r.Attempt, r.PolicyVersion, r.PayloadSize, r.PayloadSHA256 = 1, "v3", 12, "ab12"
	r.RootID, r.PredictedReason, r.PredictedProbability = "TASKS.42", "rate_limited", 0.75
	r.CreatedAt, r.ExpireAt = at.Add(-90*time.Second), at.Add(30*24*time.Hour)
	r.AgeMs = 90_123
	return r
}

func TestChangeRowRoundTrip(t *testing.T) {
	s, _, err := changeschema.Load(testenv.ModuleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	r := sampleRow()
	body, err := r.Encode()
	if err != nil {
		t.Fatalf("Encode() = %v", err)
	}
	if err := changeschema.CheckMessage(s, body); err != nil {
		t.Errorf("CheckMessage(%s) = %v, want nil", body, err)
	}
	got, err := event.DecodeChangeRow(body)
	if err != nil {
		t.Fatalf("DecodeChangeRow() = %v", err)
	}
	// Timestamps travel as microseconds.
	want := r
	want.At, want.CreatedAt, want.ExpireAt = r.At.Truncate(time.Microsecond), r.CreatedAt.Truncate(time.Microsecond), r.ExpireAt.Truncate(time.Microsecond)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeChangeRow(Encode()) differs (-want +got):\n%s", diff)
	}
	if a := r.Attributes(); a[event.AttrChangeID] != r.ChangeID || a[event.AttrTenant] != "acme" || a[event.AttrKind] != event.ChangeClaimed {
		t.Errorf("Attributes() = %v", a)
	}
}

// TestChangeIDIsTheTransitions: a retried transaction writes the same row;
// another move of the same entry another.
func TestChangeIDIsTheTransitions(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	a, b := event.NewChangeRow("e", "", "scheduled", at), event.NewChangeRow("e", "", "scheduled", at)
	if a.ChangeID != b.ChangeID {
		t.Errorf("NewChangeRow ids of one move = %s, %s, want equal", a.ChangeID, b.ChangeID)
	}
	for _, o := range []event.ChangeRow{event.NewChangeRow("e", "scheduled", "replaying", at), event.NewChangeRow("e", "", "scheduled", at.Add(time.Nanosecond)), event.NewChangeRow("f", "", "scheduled", at)} {
		if o.ChangeID == a.ChangeID {
			t.Errorf("NewChangeRow(%s %s→%s at %v).ChangeID = %s, the same as another move's", o.EntryID, o.FromStatus, o.ToStatus, o.At, o.ChangeID)
		}
	}
}

func TestDecodeChangeRowRefuses(t *testing.T) {
	good, err := sampleRow().Encode()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"not json":       "{",
		"array":          "[]",
		"missing column": strings.Replace(string(good), `"tenant":"acme",`, "", 1),
		"unknown column": strings.Replace(string(good), `{`, `{"extra":1,`, 1),
		"wrong type":     strings.Replace(string(good), `"attempt":1`, `"attempt":"1"`, 1),
		"time as text":   strings.Replace(string(good), `"moved_at":`, `"moved_at":"2026-11-21","moved_at_was":`, 1),
		"no tenant":      strings.Replace(string(good), `"tenant":"acme"`, `"tenant":""`, 1),
		"bad transition": strings.Replace(string(good), `"transition":"claimed"`, `"transition":"exploded"`, 1),
	} {
		if _, err := event.DecodeChangeRow([]byte(data)); !errors.Is(err, event.ErrInvalid) {
			t.Errorf("DecodeChangeRow(%s) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := (event.ChangeRow{}).Encode(); !errors.Is(err, event.ErrInvalid) {
		t.Errorf("ChangeRow{}.Encode() = %v, want ErrInvalid", err)
	}
}

func TestChangeTransition(t *testing.T) {
	for _, tc := range []struct{ from, to, note, want string }{
		{"", "scheduled", "", event.ChangeCreated},
		{"", "held", "", event.ChangeCreated},
		{"awaiting_approval", "scheduled", "approved by x", event.ChangeApproved},
		{"held", "scheduled", "breaker closed", event.ChangeScheduled},
		{"scheduled", "replaying", "", event.ChangeClaimed},
		{"replaying", "escalated", "", event.ChangeDecided},
		{"replaying", "awaiting_approval", "", event.ChangeDecided},
		{"replaying", "replayed", "", event.ChangeReplayed},
		{"replayed", "recovered", "", event.ChangeRecovered},
		{"escalated", "discarded", "", event.ChangeDiscarded},
		{"replaying", "quarantined", "", event.ChangeQuarantined},
		{"replaying", "held", "", event.ChangeHeld},
	} {
		if got := event.ChangeTransition(tc.from, tc.to, tc.note, "approved"); got != tc.want {
			t.Errorf("ChangeTransition(%q, %q, %q) = %q, want %q", tc.from, tc.to, tc.note, got, tc.want)
		}
	}
}
