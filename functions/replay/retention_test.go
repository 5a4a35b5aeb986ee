package replay_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
)

// TestReevaluationUpdatesRetention: a replay re-evaluates the entry; when
// the policy's rule now keeps it for another time, expire_at counts that
// time from the entry's creation, and its payload chunks follow. Both the
// published replay and a gated one carry it.
func TestReevaluationUpdatesRetention(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name   string
		rule   string
		status store.Status
		want   time.Duration
	}{
		{"replayed under a 7 d rule", "    action: auto_replay\n    strategy: transient\n    retention: 7d", store.Replayed, 7 * day},
		{"gated for approval under a 180 d rule", "    action: require_approval\n    strategy: none\n    retention: 180d", store.AwaitingApproval, 180 * day},
	}
	for i, tc := range tests {
		e := setup(t)
		id := "TASKS.90" + string(rune('0'+i))
		en := e.newEntry(t, spec{id: id, payload: bytes.Repeat([]byte("r"), store.ChunkSize+1)})
		if d := en.ExpireAt.Sub(en.CreatedAt); d != store.Retention || en.PayloadChunkCount != 2 {
			t.Fatalf("%s: recorded with retention %v and %d chunks, want %v and 2", tc.name, d, en.PayloadChunkCount, store.Retention)
		}
		e.overrideTransient(t, tc.rule)
		got := e.settled(t, e.schedule(t, id), id, tc.status)
		if d := got.ExpireAt.Sub(got.CreatedAt); d != tc.want || !got.CreatedAt.Equal(en.CreatedAt.Truncate(time.Microsecond)) { // Firestore keeps microseconds
			t.Errorf("%s: expire_at - created_at = %v (created %v, was %v), want %v from the creation", tc.name, d, got.CreatedAt, en.CreatedAt, tc.want)
		}
		chunks, err := e.fs.Collection(store.FailureLog).Doc(id).Collection(store.PayloadChunks).Documents(e.ctx).GetAll()
		if err != nil || len(chunks) != 2 {
			t.Fatalf("%s: %d chunks, %v, want 2", tc.name, len(chunks), err)
		}
		for _, c := range chunks {
			if at, _ := c.Data()["expire_at"].(time.Time); !at.Equal(got.ExpireAt) {
				t.Errorf("%s: chunk %s expire_at = %v, want the entry's %v", tc.name, c.Ref.ID, at, got.ExpireAt)
			}
		}
	}
}
