package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// An override that does not parse is not in force: policy test current and
// predictions both evaluate the embedded default (policyInForce.doc), as a
// freshly started classify or replay would, and say so.
func TestInvalidOverrideIsNotInForce(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	if _, err := e.fs.Collection(triage.OverrideCollection).Doc(triage.OverrideDoc).Set(ctx, map[string]any{triage.OverrideField: "reasons: ["}); err != nil {
		t.Fatal(err)
	}
	raw, err := event.Encode(event.Event{Schema: event.Schema, ID: "TASKS.7", Kind: event.KindExplicit, Stream: "TASKS", StreamSeq: 7, Tenant: "acme",
		Message: event.Message{Subject: "agents.backend.tasks.code_review", Data: []byte("{}"), Size: 2, SHA256: store.PayloadSum([]byte("{}"))},
		Failure: &event.Failure{Code: "timeout", Agent: "backend"}, ObservedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	evFile := filepath.Join(t.TempDir(), "event.json")
	if err := os.WriteFile(evFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	def := triage.Default().Version()

	code, out, stderr := e.run(nil, "policy", "test", "current", evFile, "--json")
	var tr testResult
	if err := json.Unmarshal([]byte(out), &tr); code != 0 || err != nil {
		t.Fatalf("policy test current = %d %q %v:\n%s", code, stderr, err, out)
	}
	if tr.PolicyVersion != def || tr.PolicySource != "embedded default (the override is invalid)" {
		t.Errorf("policy test current = version %s from %q, want %s from the embedded default", tr.PolicyVersion, tr.PolicySource, def)
	}
	code, out, stderr = e.run(nil, "predictions", "--json")
	var v predictionsView
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("predictions = %d %q %v:\n%s", code, stderr, err, out)
	}
	if v.Policy.Version != def || !strings.HasPrefix(v.Policy.Source, "firestore ") {
		t.Errorf("predictions' policy = version %s from %q, want %s (the default, the override being invalid)", v.Policy.Version, v.Policy.Source, def)
	}
}
