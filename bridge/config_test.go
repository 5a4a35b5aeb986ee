package bridge_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
)

func TestLoadEnvDefaults(t *testing.T) {
	t.Parallel()
	got, err := bridge.LoadEnv(config.MapLookup(map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}))
	if err != nil {
		t.Fatalf("LoadEnv() = %v", err)
	}
	want := bridge.Env{
		Common: config.Common{Project: "p", NATS: natsconn.Config{URL: "nats://127.0.0.1:4222"}},
		Config: bridge.Config{
			Topic:    "dlq-events",
			Names:    bridge.DefaultNames,
			Consumer: "dlq-bridge", MaxInFlight: 256,
			AdvisoryLimits: bridge.DefaultAdvisoryLimits, RecordLimits: bridge.DefaultRecordLimits,
		},
		Port: 8090,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadEnv() mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadEnvEnsureTopic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want bool
		ok   bool
	}{
		{"production default off", map[string]string{}, false, true},
		{"emulator default on", map[string]string{"PUBSUB_EMULATOR_HOST": "127.0.0.1:8682"}, true, true},
		{"emulator explicitly off", map[string]string{"PUBSUB_EMULATOR_HOST": "127.0.0.1:8682", "BRIDGE_ENSURE_TOPIC": "false"}, false, true},
		{"production explicitly on", map[string]string{"BRIDGE_ENSURE_TOPIC": "true"}, true, true},
		{"malformed", map[string]string{"BRIDGE_ENSURE_TOPIC": "sometimes"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}
			for k, v := range tt.env {
				env[k] = v
			}
			c, err := bridge.LoadEnv(config.MapLookup(env))
			if tt.ok != (err == nil) {
				t.Fatalf("LoadEnv(%v) error = %v, want ok=%v", tt.env, err, tt.ok)
			}
			if err != nil {
				if !errors.Is(err, config.ErrInvalid) {
					t.Errorf("LoadEnv error = %v, want ErrInvalid", err)
				}
				return
			}
			if c.EnsureTopic != tt.want {
				t.Errorf("LoadEnv(%v).EnsureTopic = %v, want %v", tt.env, c.EnsureTopic, tt.want)
			}
		})
	}
}

func TestLoadEnvAckWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  string
		want time.Duration
		ok   bool
	}{
		{"", 0, true}, // the bridge's default applies
		{"10s", 10 * time.Second, true},
		{"2m", 2 * time.Minute, true},
		{"1s", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}
		if tt.env != "" {
			env["BRIDGE_ACK_WAIT"] = tt.env
		}
		c, err := bridge.LoadEnv(config.MapLookup(env))
		if tt.ok != (err == nil) {
			t.Errorf("LoadEnv(BRIDGE_ACK_WAIT=%q) error = %v, want ok=%v", tt.env, err, tt.ok)
			continue
		}
		if err == nil && c.AckWait != tt.want {
			t.Errorf("LoadEnv(BRIDGE_ACK_WAIT=%q).AckWait = %v, want %v", tt.env, c.AckWait, tt.want)
		}
	}
}

func TestLoadEnvStreamLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env      map[string]string
		adv, rec bridge.StreamLimits
		ok       bool
	}{
		{env: map[string]string{"RECORD_STREAM_MAX_MSGS": "50", "RECORD_STREAM_MAX_BYTES": "1048576", "RECORD_STREAM_MAX_AGE": "72h"},
			adv: bridge.DefaultAdvisoryLimits, rec: bridge.StreamLimits{MaxMsgs: 50, MaxBytes: 1 << 20, MaxAge: 72 * time.Hour}, ok: true},
		{env: map[string]string{"ADVISORY_STREAM_MAX_MSGS": "0"}, // bytes still bound it
			adv: bridge.StreamLimits{MaxBytes: bridge.DefaultAdvisoryLimits.MaxBytes}, rec: bridge.DefaultRecordLimits, ok: true},
		{env: map[string]string{"RECORD_STREAM_MAX_MSGS": "0", "RECORD_STREAM_MAX_BYTES": "0"}}, // unbounded
		{env: map[string]string{"RECORD_STREAM_MAX_MSGS": "-1"}},
		{env: map[string]string{"ADVISORY_STREAM_MAX_BYTES": "lots"}},
		{env: map[string]string{"ADVISORY_STREAM_MAX_AGE": "forever"}},
	}
	for _, tt := range tests {
		env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}
		for k, v := range tt.env {
			env[k] = v
		}
		c, err := bridge.LoadEnv(config.MapLookup(env))
		if tt.ok != (err == nil) {
			t.Errorf("LoadEnv(%v) error = %v, want ok=%v", tt.env, err, tt.ok)
			continue
		}
		if err == nil && (c.AdvisoryLimits != tt.adv || c.RecordLimits != tt.rec) {
			t.Errorf("LoadEnv(%v) limits = %+v, %+v, want %+v, %+v", tt.env, c.AdvisoryLimits, c.RecordLimits, tt.adv, tt.rec)
		}
	}
}
