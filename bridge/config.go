package bridge

import (
	"errors"
	"fmt"
	"time"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/event"
)

// Config configures a Bridge.
type Config struct {
	// Topic is the Pub/Sub topic, "projects/P/topics/T" or a topic id of the
	// client's project.
	Topic string
	Names
	Consumer string // durable consumer name on both streams
	// MaxInFlight bounds messages being forwarded at once (and the
	// consumers' max ack pending): the memory bound.
	MaxInFlight int
	// DeleteForwarded removes a max-delivered original from its source
	// stream once its event is confirmed. Off by default.
	DeleteForwarded bool
	// EnsureTopic creates the topic when it is missing, at start and after
	// a publish found it gone (an emulator restart). Off in production,
	// where Terraform owns the topic.
	EnsureTopic bool
	// MaxEventBytes overrides event.MaxEventBytes (tests).
	MaxEventBytes int
	// AckWait is the consumers' ack wait (default 45 s): how long the
	// messages a crashed bridge held stay invisible to its successor. It
	// bounds the work on one message, so the fetch and publish timeouts
	// default to fractions of it.
	AckWait time.Duration
	// FetchTimeout bounds one read of an original message (default
	// min(5 s, AckWait/8)).
	FetchTimeout time.Duration
	// DrainTimeout bounds forwarding in-flight messages after ctx ends
	// (default 8 s: Cloud Run allows 10 s after SIGTERM).
	DrainTimeout time.Duration
	// MaxNakDelay caps the redelivery delay after a failure (default 30 s).
	MaxNakDelay time.Duration
	// PublishTimeout bounds one publish including the client's retries
	// (default min(20 s, AckWait/2)); the message is then NAKed and waits
	// in JetStream.
	PublishTimeout time.Duration
	// AdvisoryLimits and RecordLimits size the capture streams the bridge
	// creates (zero: DefaultAdvisoryLimits, DefaultRecordLimits).
	AdvisoryLimits, RecordLimits StreamLimits
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

func (c *Config) defaults() error {
	if c.Topic == "" || c.AdvisoryStream == "" || c.RecordStream == "" || c.FailureBucket == "" || c.Consumer == "" {
		return errors.New("bridge: topic, streams, bucket and consumer are required")
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 256
	}
	if c.MaxEventBytes <= 0 {
		c.MaxEventBytes = event.MaxEventBytes
	}
	if c.AckWait <= 0 {
		c.AckWait = 45 * time.Second
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = min(5*time.Second, c.AckWait/8)
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 8 * time.Second
	}
	if c.MaxNakDelay <= 0 {
		c.MaxNakDelay = 30 * time.Second
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = min(20*time.Second, c.AckWait/2)
	}
	if c.AckWait < c.PublishTimeout+2*c.FetchTimeout {
		return fmt.Errorf("bridge: ack wait %s must exceed the publish timeout %s plus two fetch timeouts %s",
			c.AckWait, c.PublishTimeout, c.FetchTimeout)
	}
	if c.AdvisoryLimits == (StreamLimits{}) {
		c.AdvisoryLimits = DefaultAdvisoryLimits
	}
	if c.RecordLimits == (StreamLimits{}) {
		c.RecordLimits = DefaultRecordLimits
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// DefaultTopic is the Pub/Sub topic id when DLQ_TOPIC is unset.
const DefaultTopic = "dlq-events"

// Env is the bridge's environment (docs/configuration.md): the variables every
// component reads, the bridge's Config and its port. Flags of cmd/bridge
// override its fields.
type Env struct {
	config.Common
	Config
	Port int // PORT: health and metrics
}

// LoadEnv reads the bridge's environment, reporting every missing or
// malformed variable at once.
func LoadEnv(lookup config.Lookup) (Env, error) {
	r := config.NewReader(lookup)
	e := Env{Common: config.ReadCommon(r)}
	e.Topic = r.String("DLQ_TOPIC", DefaultTopic)
	e.AdvisoryStream, e.RecordStream = config.ReadCaptureStreams(r)
	e.FailureBucket = r.String("FAILURE_BUCKET", event.DefaultFailureBucket)
	e.Consumer = r.String("BRIDGE_CONSUMER", event.DefaultBridgeConsumer)
	e.Port = r.Int("PORT", 8090, 1, 65535)
	e.DeleteForwarded = r.Bool("DELETE_FORWARDED", false)
	e.MaxInFlight = r.Int("BRIDGE_MAX_IN_FLIGHT", 256, 1, 10000)
	// Default on with the emulator, whose topics vanish in a restart, and
	// off otherwise: Terraform owns the production topic.
	e.EnsureTopic = r.Bool("BRIDGE_ENSURE_TOPIC", e.PubSubEmulatorHost != "")
	// Zero when unset: Config's default (45 s) applies.
	e.AckWait = r.Duration("BRIDGE_ACK_WAIT", 0)
	r.Check(e.AckWait == 0 || e.AckWait >= 5*time.Second, "BRIDGE_ACK_WAIT", "%s is below the 5s minimum", e.AckWait)
	e.AdvisoryLimits = readLimits(r, "ADVISORY_STREAM", DefaultAdvisoryLimits)
	e.RecordLimits = readLimits(r, "RECORD_STREAM", DefaultRecordLimits)
	return e, r.Err()
}

// readLimits reads <prefix>_MAX_MSGS, _MAX_BYTES and _MAX_AGE: the limits of
// a capture stream the bridge creates. A stream must be bounded by count or
// size; an age limit is allowed but warned about (Ensure), since it deletes
// what the bridge has not forwarded yet.
func readLimits(r *config.Reader, prefix string, def StreamLimits) StreamLimits {
	l := StreamLimits{
		MaxMsgs:  int64(r.Int(prefix+"_MAX_MSGS", int(def.MaxMsgs), 0, 1<<40)),
		MaxBytes: int64(r.Int(prefix+"_MAX_BYTES", int(def.MaxBytes), 0, 1<<50)),
		MaxAge:   r.Duration(prefix+"_MAX_AGE", def.MaxAge),
	}
	r.Check(l.MaxMsgs > 0 || l.MaxBytes > 0, prefix+"_MAX_MSGS", "and %s_MAX_BYTES are both 0: the stream would grow without bound", prefix)
	return l
}
