package replay

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/shared/tasks"
)

// FuzzReadTask feeds arbitrary bodies and task-name headers to the parser of
// a replay task (reachable by anyone who gets past authentication, and by a
// queue holding a stale or hand-made task). Properties: an accepted task has
// an entry id, an attempt >= 1 and exactly the task name tasks.Name makes for
// them (so one entry attempt can never be claimed under two names), and the
// body the scheduler writes for it parses back to the same task.
func FuzzReadTask(f *testing.F) {
	f.Add([]byte(`{"entry_id":"TASKS.42","attempt":1}`), "")
	f.Add([]byte(`{"entry_id":"TASKS.42","attempt":1}`), tasks.Name("TASKS.42", 1))
	f.Add([]byte(`{"entry_id":"TASKS.42","attempt":1}`), tasks.Name("TASKS.42", 2))
	f.Add([]byte(`{"entry_id":"TASKS.42","attempt":"1"}`), "")
	f.Add([]byte(`{"entry_id":"TASKS.42","attempt":1,"extra":true}`), "")
	f.Add([]byte(`{"entry_id":"TASKS.42","attempt":1} {}`), "")
	f.Add([]byte(`{"entry_id":"","attempt":0}`), "")
	f.Fuzz(func(t *testing.T, body []byte, name string) {
		r := httptest.NewRequest("POST", "/Replay", bytes.NewReader(body))
		if name != "" {
			r.Header.Set(tasks.HeaderTaskName, name)
		}
		b, got, err := readTask(r)
		if err != nil {
			// The 400 answer carries this text; it must name the component.
			if !strings.HasPrefix(err.Error(), "replay: ") {
				t.Fatalf("readTask(%q) error %q does not say it is replay's", body, err)
			}
			return
		}
		if b.EntryID == "" || b.Attempt < 1 || len(body) > maxBody {
			t.Fatalf("readTask(%q) accepted %+v", body, b)
		}
		if got != tasks.Name(b.EntryID, b.Attempt) {
			t.Fatalf("readTask(%q, %q) = task %q, want %q", body, name, got, tasks.Name(b.EntryID, b.Attempt))
		}
		again, err := json.Marshal(tasks.Body{EntryID: b.EntryID, Attempt: b.Attempt})
		if err != nil {
			t.Fatal(err)
		}
		r2 := httptest.NewRequest("POST", "/Replay", bytes.NewReader(again))
		b2, _, err := readTask(r2)
		if err != nil || b2 != b {
			t.Fatalf("readTask(Marshal(%+v)) = %+v, %v", b, b2, err)
		}
	})
}
