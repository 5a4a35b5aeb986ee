package classify

import (
	"bytes"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// TestNewEntryCarriesTheRetention: classify's new entry has expire_at =
// created_at + the retention the policy decided, and the chunks of a large
// payload carry the same expire_at.
func TestNewEntryCarriesTheRetention(t *testing.T) {
	e := setup(t)
	ctx := testenv.Context(t)
	// Permanent failures of devops kept 180 d, transient ones of marketing
	// 7 d; everything else the policy default, 30 d.
	if _, err := e.store.SavePolicyOverride(ctx, testenv.WithRules(t, triage.DefaultYAML(), testenv.RetentionRules)); err != nil {
		t.Fatalf("SavePolicyOverride() = %v", err)
	}
	const day = 24 * time.Hour
	big := bytes.Repeat([]byte("z"), store.ChunkSize+1)
	tests := []struct {
		name    string
		seq     uint64
		code    string
		subject string
		payload []byte
		want    time.Duration
	}{
		{"devops permanent, large payload", 1, "impossible_task", "agents.devops.tasks.deploy", big, 180 * day},
		{"marketing transient", 2, "timeout", "agents.marketing.tasks.post", []byte("p"), 7 * day},
		{"devops transient: the default", 3, "timeout", "agents.devops.tasks.deploy", []byte("p"), 30 * day},
	}
	for _, tc := range tests {
		ev := explicit(tc.seq, tc.code, "", msg{subject: tc.subject, payload: tc.payload})
		e.handle(t, cloudEvent(t, ev))
		got := e.entry(t, ev.ID)
		if d := got.ExpireAt.Sub(got.CreatedAt); d != tc.want || got.Plan.Retention() != tc.want {
			t.Errorf("%s: expire_at - created_at = %v (plan %v), want %v", tc.name, d, got.Plan.Retention(), tc.want)
		}
		chunks, err := e.fs.Collection(store.FailureLog).Doc(got.ID).Collection(store.PayloadChunks).Documents(ctx).GetAll()
		if err != nil || len(chunks) != got.PayloadChunkCount {
			t.Fatalf("%s: %d chunks, %v, want %d", tc.name, len(chunks), err, got.PayloadChunkCount)
		}
		for _, c := range chunks {
			if at, _ := c.Data()["expire_at"].(time.Time); !at.Equal(got.ExpireAt) {
				t.Errorf("%s: chunk %s expire_at = %v, want the entry's %v", tc.name, c.Ref.ID, at, got.ExpireAt)
			}
		}
	}
}
