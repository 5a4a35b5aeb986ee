// Command bridge forwards dead JetStream messages (consumer advisories and
// agentkit's explicit records) to the Pub/Sub topic dlq-events. It runs as the
// Cloud Run container and locally (`go run ./cmd/bridge`). Configuration comes
// from the environment (docs/configuration.md, docs/bridge.md); flags override
// it.
//
// Readiness: GET /healthz on PORT answers 200 once the streams, bucket,
// topic and consumers are set up, and the log line "bridge ready" is
// written; it answers 503 while NATS is disconnected or the last publish
// failed.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/jsdlq/jsdlq/bridge"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func main() { obs.Command("bridge", run) }

func run(ctx context.Context, log *slog.Logger, args []string) error {
	cfg, err := bridge.LoadEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("bridge", flag.ContinueOnError)
	fs.StringVar(&cfg.Topic, "topic", cfg.Topic, "Pub/Sub topic id or projects/P/topics/T (DLQ_TOPIC)")
	fs.StringVar(&cfg.NATS.URL, "nats-url", cfg.NATS.URL, "NATS server URL(s) (NATS_URL)")
	fs.StringVar(&cfg.NATS.Creds, "nats-creds", cfg.NATS.Creds, "NATS credentials file (NATS_CREDS)")
	fs.StringVar(&cfg.AdvisoryStream, "advisory-stream", cfg.AdvisoryStream, "advisory stream (ADVISORY_STREAM)")
	fs.StringVar(&cfg.RecordStream, "record-stream", cfg.RecordStream, "explicit record stream (RECORD_STREAM)")
	fs.StringVar(&cfg.FailureBucket, "failure-bucket", cfg.FailureBucket, "failure KV bucket (FAILURE_BUCKET)")
	fs.StringVar(&cfg.Consumer, "consumer", cfg.Consumer, "durable consumer name (BRIDGE_CONSUMER)")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "health and metrics port (PORT)")
	fs.BoolVar(&cfg.DeleteForwarded, "delete-forwarded", cfg.DeleteForwarded, "delete max-delivered originals once forwarded (DELETE_FORWARDED)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", cfg.MaxInFlight, "messages forwarded at once (BRIDGE_MAX_IN_FLIGHT)")
	fs.DurationVar(&cfg.AckWait, "ack-wait", cfg.AckWait, "consumer ack wait; bounds the work on one message (BRIDGE_ACK_WAIT)")
	fs.BoolVar(&cfg.EnsureTopic, "ensure-topic", cfg.EnsureTopic, "create the topic when missing (BRIDGE_ENSURE_TOPIC; default on with PUBSUB_EMULATOR_HOST)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	nc, err := natsconn.Connect(ctx, cfg.NATS.Named("jsdlq-bridge", log.With("dependency", "nats")))
	if err != nil {
		return err
	}
	defer nc.Close()
	ps, err := bridge.NewPubSubClient(ctx, cfg.Project, cfg.PubSubEmulatorHost)
	if err != nil {
		return err
	}
	defer ps.Close()
	b, err := bridge.New(cfg.Config, nc, ps, log)
	if err != nil {
		return err
	}

	// Health and metrics answer in milliseconds: a probe or scrape held
	// longer is cut off rather than piling up.
	srv, err := obs.Listen("", cfg.Port, b.Handler(), obs.Limits{Request: 10 * time.Second})
	if err != nil {
		return err
	}
	go func() {
		if err := <-srv.Failed(); err != nil {
			log.Error("http server failed", "error", err)
		}
	}()
	log.Info("serving health and metrics", "addr", srv.Addr())

	go b.LogStats(ctx, bridge.DefaultStatsInterval)
	runErr := b.Run(ctx)
	_ = srv.Shutdown(2 * time.Second)
	if err := nc.Drain(); err != nil {
		log.Warn("nats drain", "error", err)
	}
	return runErr
}
