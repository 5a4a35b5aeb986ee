package agentkit

import (
	"context"
	"strings"
	"testing"
)

// A project the client library refuses is an error naming the kit and the
// project, not a client that fails later.
func TestOpenFirestoreRefusesNoProject(t *testing.T) {
	c, err := OpenFirestore(context.Background(), "")
	if err == nil {
		c.Close()
		t.Fatal(`OpenFirestore(ctx, "") = a client, want an error`)
	}
	if !strings.Contains(err.Error(), `agentkit: firestore client for ""`) {
		t.Errorf(`OpenFirestore(ctx, "") = %v, want an error naming the kit and the project`, err)
	}
}
