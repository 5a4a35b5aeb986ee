package replay_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/functions/replay"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// captureToken has the Cloud Tasks emulator mint a genuine OIDC token for
// audience and returns the Authorization header it dispatched.
func (e *env) captureToken(t *testing.T, audience string) string {
	return testenv.MintToken(t, e.ct.Client, e.queue, tasksSA, audience)
}

// post sends a replay request with authorization authz and returns the
// status and decoded result.
func (e *env) post(t *testing.T, authz, entryID string, attempt int) (int, replay.Result) {
	t.Helper()
	body, _ := json.Marshal(tasks.Body{EntryID: entryID, Attempt: attempt})
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, e.url, bytes.NewReader(body))
	req.Header.Set("Authorization", authz)
	req.Header.Set(tasks.HeaderTaskName, tasks.Name(entryID, attempt))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res replay.Result
	_ = json.NewDecoder(resp.Body).Decode(&res)
	return resp.StatusCode, res
}

// A genuine token, captured and replayed after the task completed, for the
// same attempt and for a made-up next attempt: both answered 200 "skipped",
// nothing published a second time. Why: the claim is a transaction that only
// takes a scheduled entry under its own task name; authentication alone
// never reaches the publish.
func TestValidTokenReplayedAfterCompletionPublishesNothing(t *testing.T) {
	e := setup(t)
	en := e.newEntry(t, spec{id: "TASKS.301"})
	e.schedule(t, en.ID)
	e.waitStatus(t, en.ID, store.Replayed)
	if n := len(e.msgs(t)); n != 1 {
		t.Fatalf("messages after the replay = %d, want 1", n)
	}
	authz := e.captureToken(t, e.url)
	for _, attempt := range []int{1, 2} {
		code, res := e.post(t, authz, en.ID, attempt)
		if code != http.StatusOK || res.Outcome != replay.OutcomeSkipped {
			t.Errorf("replayed token, attempt %d: %d %+v, want 200 skipped", attempt, code, res)
		}
	}
	// A token for another function is refused before anything is read.
	other := e.captureToken(t, "https://reconcile.example/Reconcile")
	if code, _ := e.post(t, other, en.ID, 1); code != http.StatusForbidden {
		t.Errorf("token for another audience: %d, want 403", code)
	}
	if n := len(e.msgs(t)); n != 1 {
		t.Fatalf("messages = %d, want 1: a replayed token published again", n)
	}
	if got, _ := e.store.GetMeta(e.ctx, en.ID); got.Status != store.Replayed || got.Replays != 1 {
		t.Fatalf("entry = %s with %d replays, want replayed once", got.Status, got.Replays)
	}
}

// Entries edited by hand into states no component writes. Replay must not
// crash and must not publish: an unknown status is skipped (200); a field
// of the wrong type cannot be read and is refused with an error naming the
// field (non-2xx, so the queue's retry limit ends it and reconcile reports
// it); a payload chunk that vanished escalates the entry as payload_corrupt.
func TestHandEditedEntriesDoNotPublish(t *testing.T) {
	e := setup(t)
	unknown := e.newEntry(t, spec{id: "TASKS.311"})
	typed := e.newEntry(t, spec{id: "TASKS.312"})
	chunked := e.newEntry(t, spec{id: "TASKS.313", payload: bytes.Repeat([]byte("p"), 3*store.ChunkSize/2)})
	col := e.fs.Collection(store.FailureLog)
	if _, err := col.Doc(unknown.ID).Update(e.ctx, []firestore.Update{{Path: "status", Value: "exploded"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := col.Doc(typed.ID).Update(e.ctx, []firestore.Update{{Path: "replays", Value: "many"}}); err != nil {
		t.Fatal(err)
	}
	chunks, err := col.Doc(chunked.ID).Collection(store.PayloadChunks).Documents(e.ctx).GetAll()
	if err != nil || len(chunks) < 2 {
		t.Fatalf("payload chunks of %s = %d, %v; want at least 2", chunked.ID, len(chunks), err)
	}
	if _, err := chunks[1].Ref.Delete(e.ctx); err != nil {
		t.Fatal(err)
	}
	authz := e.captureToken(t, e.url)

	if code, res := e.post(t, authz, unknown.ID, 1); code != http.StatusOK || res.Outcome != replay.OutcomeSkipped {
		t.Errorf("unknown status: %d %+v, want 200 skipped", code, res)
	}
	code, _ := e.post(t, authz, typed.ID, 1)
	if code < 500 {
		t.Errorf("wrong-typed field: %d, want a 5xx the queue retries until its limit", code)
	}
	if lines := e.logs.Lines(typed.ID); !strings.Contains(strings.Join(lines, "\n"), "replays") {
		t.Errorf("the log does not name the unreadable field:\n%s", strings.Join(lines, "\n"))
	}
	code, res := e.post(t, authz, chunked.ID, 1)
	if code != http.StatusOK || res.Outcome != replay.OutcomeEscalated || !strings.Contains(res.Note, replay.ReasonPayloadCorrupt) {
		t.Errorf("missing chunk: %d %+v, want 200 escalated payload_corrupt", code, res)
	}
	if got, _ := e.store.GetMeta(e.ctx, chunked.ID); got.Status != store.Escalated {
		t.Errorf("entry with a missing chunk = %s, want escalated", got.Status)
	}
	if n := len(e.msgs(t)); n != 0 {
		t.Fatalf("messages = %d, want 0: nothing hand-edited may be published", n)
	}
}
