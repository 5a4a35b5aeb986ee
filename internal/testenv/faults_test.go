package testenv_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/internal/testenv"
)

// The crash comes after the message is stored: the caller sees the error,
// the stream has the message, and a retry with the same Nats-Msg-Id is the
// stream's duplicate.
func TestCrashAfterPublish(t *testing.T) {
	n := testenv.NewNATS(t)
	_, js := n.Connect(t)
	ctx := testenv.Context(t)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"agents.>"}})
	if err != nil {
		t.Fatalf("CreateStream() = %v", err)
	}
	crash := errors.New("injected crash")
	crashes := 0
	pub := testenv.CrashAfterPublish(js, func(m *nats.Msg) error {
		if crashes == 0 {
			crashes++
			return crash
		}
		return nil
	})
	msg := &nats.Msg{Subject: "agents.cto.tasks.review", Data: []byte("t1")}

	tests := []struct {
		name    string
		wantErr error
		wantDup bool
	}{
		{name: "first publish crashes", wantErr: crash},
		{name: "retry is a duplicate", wantDup: true},
	}
	for _, tt := range tests {
		ack, err := pub.PublishMsg(ctx, msg, jetstream.WithMsgID("m1"))
		if !errors.Is(err, tt.wantErr) {
			t.Fatalf("%s: PublishMsg() error = %v, want %v", tt.name, err, tt.wantErr)
		}
		if err == nil && ack.Duplicate != tt.wantDup {
			t.Errorf("%s: PublishMsg() ack.Duplicate = %t, want %t", tt.name, ack.Duplicate, tt.wantDup)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("Info() = %v", err)
		}
		if got := info.State.Msgs; got != 1 {
			t.Errorf("%s: messages = %d, want 1", tt.name, got)
		}
	}
}
