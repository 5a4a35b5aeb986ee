package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/nats-io/nats.go/jetstream"
)

// Subjects the advisory stream captures: the two consumer advisories that
// announce a dead message.
const (
	SubjectMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"
	SubjectTerminated    = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>"
)

// Defaults of what Ensure creates. The advisory stream keeps advisories
// through a bridge outage (no age limit); the record stream holds explicit
// records, which carry payloads, so it is bounded tighter. Both refuse new
// messages when full (discard new) instead of dropping the oldest: a refused
// record fails agentkit's copy, so the task is NAKed and kept in its work
// stream, where a dropped one was lost with its payload. Reconcile trims what
// the bridge forwarded and the capture audit checked, and alerts at 80 %
// fill (docs/bridge.md, "What the bridge sets up"). Both are file-backed:
// memory storage would lose them in a server restart.
const (
	DefaultRecordDedup = 5 * time.Minute
	DefaultFailureTTL  = 7 * 24 * time.Hour
)

// StreamLimits size a capture stream; 0 is no limit of that kind. An age
// limit deletes what the bridge has not forwarded yet once it is that old,
// so the defaults have none.
type StreamLimits struct {
	MaxMsgs  int64
	MaxBytes int64
	MaxAge   time.Duration
}

// Default limits of the capture streams (ADVISORY_STREAM_MAX_*,
// RECORD_STREAM_MAX_*).
var (
	DefaultAdvisoryLimits = StreamLimits{MaxMsgs: 100_000, MaxBytes: 256 << 20}
	DefaultRecordLimits   = StreamLimits{MaxMsgs: 10_000, MaxBytes: 1 << 30}
)

func (l StreamLimits) apply(c *jetstream.StreamConfig) {
	c.MaxMsgs, c.MaxBytes, c.MaxAge = max(l.MaxMsgs, 0), max(l.MaxBytes, 0), max(l.MaxAge, 0)
	if c.MaxMsgs == 0 {
		c.MaxMsgs = -1
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = -1
	}
}

// ErrIncompatible is returned when a stream or bucket exists with a
// configuration the bridge cannot work with. The bridge never changes an
// existing stream: an operator owns that decision.
var ErrIncompatible = errors.New("bridge: incompatible existing configuration")

// Names are the JetStream resources the bridge uses.
type Names struct {
	AdvisoryStream string
	RecordStream   string
	FailureBucket  string
}

// DefaultNames are the resources' default names (docs/configuration.md), the
// ones every deployment uses unless configured otherwise.
var DefaultNames = Names{
	AdvisoryStream: event.DefaultAdvisoryStream,
	RecordStream:   event.DefaultRecordStream,
	FailureBucket:  event.DefaultFailureBucket,
}

// AdvisoryStreamConfig is the configuration Ensure creates for the advisory stream.
func AdvisoryStreamConfig(name string, l StreamLimits) jetstream.StreamConfig {
	c := jetstream.StreamConfig{
		Name:        name,
		Description: "jsdlq: consumer advisories of dead messages (max deliveries, terminated)",
		Subjects:    []string{SubjectMaxDeliveries, SubjectTerminated},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
	}
	l.apply(&c)
	return c
}

// RecordStreamConfig is the configuration Ensure creates for the record stream.
func RecordStreamConfig(name string, l StreamLimits) jetstream.StreamConfig {
	c := jetstream.StreamConfig{
		Name:        name,
		Description: "jsdlq: explicit DLQ records copied by agentkit before a TERM",
		Subjects:    []string{event.RecordSubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		Duplicates:  DefaultRecordDedup,
	}
	l.apply(&c)
	return c
}

// EnsureOption configures Ensure.
type EnsureOption func(*ensureOptions)

type ensureOptions struct{ advisory, record StreamLimits }

// WithLimits sets the limits of the streams Ensure creates (default
// DefaultAdvisoryLimits, DefaultRecordLimits).
func WithLimits(advisory, record StreamLimits) EnsureOption {
	return func(o *ensureOptions) { o.advisory, o.record = advisory, record }
}

// FailureBucketConfig is the configuration Ensure creates for the failure bucket.
func FailureBucketConfig(name string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "jsdlq: last recorded failure per message, key <stream>.<seq>",
		TTL:         DefaultFailureTTL,
		Storage:     jetstream.FileStorage,
		History:     1,
	}
}

// Ensure creates the advisory stream, the record stream and the failure
// bucket when absent, and verifies them when present. A present resource is
// never resized; one the bridge cannot work with is reported with every
// difference in an error wrapping ErrIncompatible. Harmless differences
// (limits an operator tuned) are logged. The one change made to a present
// stream is its discard policy: a capture stream that discards the oldest
// message when full (the default before) is moved to discard new, which
// deletes nothing (migrateDiscard).
func Ensure(ctx context.Context, js jetstream.JetStream, n Names, log *slog.Logger, opts ...EnsureOption) error {
	o := ensureOptions{advisory: DefaultAdvisoryLimits, record: DefaultRecordLimits}
	for _, opt := range opts {
		opt(&o)
	}
	var errs []error
	if err := ensureStream(ctx, js, AdvisoryStreamConfig(n.AdvisoryStream, o.advisory), log); err != nil {
		errs = append(errs, err)
	}
	if err := ensureStream(ctx, js, RecordStreamConfig(n.RecordStream, o.record), log); err != nil {
		errs = append(errs, err)
	}
	if err := ensureBucket(ctx, js, FailureBucketConfig(n.FailureBucket), log); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, log *slog.Logger) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another bridge instance created it meanwhile; verify theirs.
			return ensureStream(ctx, js, want, log)
		}
		if err != nil {
			return fmt.Errorf("bridge: create stream %s: %w", want.Name, err)
		}
		log.Info("created stream", "stream", want.Name, "subjects", want.Subjects)
		return nil
	}
	if err != nil {
		return fmt.Errorf("bridge: stream info %s: %w", want.Name, err)
	}
	got := s.CachedInfo().Config
	var problems []string
	for _, subj := range want.Subjects {
		if !slices.Contains(got.Subjects, subj) {
			problems = append(problems, fmt.Sprintf("subjects %v lack %q", got.Subjects, subj))
		}
	}
	if got.Retention != want.Retention {
		problems = append(problems, fmt.Sprintf("retention is %s, want %s", got.Retention, want.Retention))
	}
	if got.Storage != want.Storage {
		problems = append(problems, fmt.Sprintf("storage is %s, want %s (memory loses dead messages in a restart)", got.Storage, want.Storage))
	}
	if want.Duplicates > 0 && got.Duplicates <= 0 {
		problems = append(problems, "no duplicate window (agentkit relies on Nats-Msg-Id dedup)")
	}
	if got.MaxAge > 0 && want.MaxAge == 0 {
		log.Warn("stream has an age limit: dead messages older than it are lost if the bridge is down that long",
			"stream", want.Name, "max_age", got.MaxAge.String())
	}
	if got.MaxMsgs != want.MaxMsgs || got.MaxBytes != want.MaxBytes {
		log.Info("stream limits differ from the configured ones; keeping them (resize with nats stream edit)", "stream", want.Name,
			"max_msgs", got.MaxMsgs, "max_bytes", got.MaxBytes, "configured_max_msgs", want.MaxMsgs, "configured_max_bytes", want.MaxBytes)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: stream %s: %s", ErrIncompatible, want.Name, strings.Join(problems, "; "))
	}
	if got.Discard != jetstream.DiscardNew {
		migrateDiscard(ctx, js, got, log)
	}
	return nil
}

// migrateDiscard moves a capture stream made to discard its oldest message
// when full to discard new. The change deletes nothing and keeps every
// limit: only what happens at the limit changes, from a silent loss of the
// oldest record to a refused publish the publisher sees (agentkit NAKs the
// task and keeps it). A NATS user without the right to edit the stream
// leaves it as it is, logged with the command that does it; the bridge
// works either way, and reconcile reports the stream's discard policy.
func migrateDiscard(ctx context.Context, js jetstream.JetStream, got jetstream.StreamConfig, log *slog.Logger) {
	cfg := got
	cfg.Discard = jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		log.Error("capture stream discards the oldest message when full (a silent loss) and could not be moved to discard new; "+
			"run: nats stream edit "+got.Name+" --discard new", "stream", got.Name, "error", err.Error())
		return
	}
	log.Warn("capture stream moved from discard old to discard new: when full it now refuses new messages instead of dropping the oldest",
		"stream", got.Name, "max_msgs", got.MaxMsgs, "max_bytes", got.MaxBytes)
}

func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, log *slog.Logger) error {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateKeyValue(ctx, want)
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return ensureBucket(ctx, js, want, log)
		}
		if err != nil {
			return fmt.Errorf("bridge: create bucket %s: %w", want.Bucket, err)
		}
		log.Info("created key-value bucket", "bucket", want.Bucket, "ttl", want.TTL.String())
		return nil
	}
	if err != nil {
		return fmt.Errorf("bridge: bucket %s: %w", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("bridge: bucket status %s: %w", want.Bucket, err)
	}
	if st.TTL() == 0 {
		log.Warn("failure bucket has no TTL: records of recovered messages are never removed", "bucket", want.Bucket)
	}
	return nil
}
