package replay_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/internal/storetest"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// readVersions reads every version of id's payload.
func (e *env) readVersions(t *testing.T, id string) (*store.Entry, [][]byte) {
	t.Helper()
	got, err := e.store.Get(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, v := range got.Versions() {
		b, err := e.store.VersionPayload(e.ctx, got, v.N)
		if err != nil {
			t.Fatalf("VersionPayload(%s, %d) = %v", id, v.N, err)
		}
		out = append(out, b)
	}
	return got, out
}

// A replay publishes the version the entry names, on a real nats-server:
// an approved edit too large for the server is escalated with nothing
// published; the second edit, version 3 based on 2, is published with the
// header it sets; the original and version 2 stay readable, their bytes
// and sha256 unchanged, and the entry's own headers are not rewritten.
func TestReplayPublishesTheApprovedVersion(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.501", headers: map[string][]string{"X-Priority": {"low"}}})
	original := bytes.Clone(en.Payload)
	if _, err := storetest.Refuse(e.ctx, e.store, en.ID, store.Escalated, "test", ""); err != nil {
		t.Fatal(err)
	}

	// Version 2: valid JSON of 1.5 MiB, in three chunks; the server takes 1 MiB.
	tooLarge := []byte(`{"pad":"` + strings.Repeat("x", 3*store.ChunkSize-20) + `"}`)
	if _, err := e.op.Approve(e.ctx, tenant, en.ID, operator.Edits{By: alice, Payload: tooLarge}); err != nil {
		t.Fatalf("Approve(version 2) = %v", err)
	}
	refused := e.settled(t, e.sched.FullName(tasks.Name(en.ID, 2)), en.ID, store.Escalated)
	if note := refused.History[len(refused.History)-1].Note; !strings.Contains(note, "payload_too_large") {
		t.Errorf("version 2's replay left with %q, want payload_too_large", note)
	}
	e.wantMsgs(t, 0)

	// Version 3, made on version 2: small again, with a header.
	fixed := []byte(`{"task":"TASKS.501","fixed":true}`)
	if _, err := e.op.Approve(e.ctx, tenant, en.ID, operator.Edits{By: authority.Actor{Name: "bob", Role: authority.Approver}, Payload: fixed, Base: 2, SetHeaders: map[string]string{"x-priority": "high"}}); err != nil {
		t.Fatalf("Approve(version 3) = %v", err)
	}
	got := e.waitStatus(t, en.ID, store.Replayed)
	msgs := e.msgs(t)
	if len(msgs) != 1 {
		t.Fatalf("messages = %d, want 1", len(msgs))
	}
	// NATS header names are case-sensitive: the edit's name replaces the
	// stored one of any case, and is sent as the operator wrote it.
	if !bytes.Equal(msgs[0].Data, fixed) || !slices.Equal(msgs[0].Header.Values("x-priority"), []string{"high"}) || msgs[0].Header.Values("X-Priority") != nil {
		t.Errorf("published %q with x-priority %v and X-Priority %v, want version 3 %q with x-priority high alone", msgs[0].Data,
			msgs[0].Header.Values("x-priority"), msgs[0].Header.Values("X-Priority"), fixed)
	}
	v, err := got.ReplayVersion()
	if err != nil || v.N != 3 || v.Base != 2 || v.By != "bob" {
		t.Errorf("replay version = %+v, %v, want version 3 based on 2 by bob", v, err)
	}
	if note := got.History[len(got.History)-1].Note; !strings.Contains(note, "payload v3 (") || !strings.Contains(note, store.PayloadSum(fixed)) {
		t.Errorf("publish recorded as %q, want it to name payload v3 and its sha256", note)
	}
	got, payloads := e.readVersions(t, en.ID)
	if len(payloads) != 3 || !bytes.Equal(payloads[0], original) || !bytes.Equal(payloads[1], tooLarge) || !bytes.Equal(payloads[2], fixed) {
		t.Errorf("versions = %d, want the original, version 2 and version 3 byte for byte", len(payloads))
	}
	if got.PayloadSHA256 != store.PayloadSum(original) || !bytes.Equal(got.Payload, original) {
		t.Errorf("original sha256 = %s, want %s unchanged", got.PayloadSHA256, store.PayloadSum(original))
	}
	if diff := cmp.Diff(en.Headers, got.Headers); diff != "" {
		t.Errorf("stored headers rewritten (-want +got):\n%s", diff)
	}
}

// A payload the bridge could not capture is version 1, missing: the replay
// escalates it; an approval supplying a binary payload of two chunks is
// version 2, published byte for byte, and version 1 stays missing (its
// size and digest as the bridge knew them).
func TestReplayPublishesASuppliedBinaryPayload(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.502", missing: true})
	e.settled(t, e.schedule(t, en.ID), en.ID, store.Escalated)
	if _, err := e.op.Approve(e.ctx, tenant, en.ID, operator.Edits{By: alice}); err == nil {
		t.Errorf("Approve(a missing payload, no edit) = nil, want ErrPayloadMissing")
	}
	supplied := bytes.Repeat([]byte{0, 0xff, 0x80, 0x7f}, (store.ChunkSize+100)/4)
	if _, err := e.op.Approve(e.ctx, tenant, en.ID, operator.Edits{By: alice, Payload: supplied}); err != nil {
		t.Fatalf("Approve(supplied payload) = %v", err)
	}
	e.waitStatus(t, en.ID, store.Replayed)
	msgs := e.msgs(t)
	if len(msgs) != 1 || !bytes.Equal(msgs[0].Data, supplied) {
		t.Fatalf("published %d messages, want 1 with the %d bytes supplied", len(msgs), len(supplied))
	}
	got, payloads := e.readVersions(t, en.ID)
	if v1, _ := got.Version(1); !v1.Missing || payloads[0] != nil || len(payloads) != 2 || !bytes.Equal(payloads[1], supplied) {
		t.Errorf("versions: 1 missing = %t (%d bytes), %d versions; want version 1 missing and version 2 the supplied bytes", v1.Missing, len(payloads[0]), len(payloads))
	}
	if v2, _ := got.Version(2); v2.Chunks != 2 {
		t.Errorf("version 2 in %d chunks, want 2", v2.Chunks)
	}
}
