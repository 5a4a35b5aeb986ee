// Command cloudtasks-emulator serves the google.cloud.tasks.v2 gRPC API
// locally and dispatches HTTP tasks like Cloud Tasks does (see
// docs/cloudtasks-emulator.md).
//
//	cloudtasks-emulator --host-port=127.0.0.1:8123 [--data-dir DIR] [--jwks-host-port=127.0.0.1:8124]
//
// Once both listeners are bound it logs one JSON line with message
// "listening" carrying the gRPC address and the JWKS URL.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/shared/clientopt"
	"github.com/jsdlq/jsdlq/shared/obs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "cloudtasks-emulator:", err)
		os.Exit(1)
	}
}

// ready, when not nil, receives the bound gRPC and JWKS addresses.
func run(ctx context.Context, args []string, out io.Writer, ready chan<- [2]string) error {
	fs := flag.NewFlagSet("cloudtasks-emulator", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	env := loadConfig(os.LookupEnv)
	hostPort := fs.String("host-port", cmp.Or(env.HostPort, cloudtasks.DefaultHostPort), "gRPC listen address (default $"+cloudtasks.EnvHost+" or "+cloudtasks.DefaultHostPort+")")
	jwksHostPort := fs.String("jwks-host-port", "", "HTTP listen address for "+clientopt.CloudTasksJWKSPath+" and /healthz (default: gRPC port + 1)")
	dataDir := fs.String("data-dir", env.DataDir, "directory keeping queues, tasks and the signing key across restarts (default: in memory)")
	tombstone := fs.Duration("queue-tombstone", cloudtasks.DefaultQueueTombstone, "refuse to recreate a deleted queue's name for this long (FAILED_PRECONDITION), like the real service; 0 = off")
	reservation := fs.Duration("name-reservation", cloudtasks.DefaultNameReservation, "how long a finished or deleted task's name stays taken")
	debug := fs.Bool("debug", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := obs.NewLogger(out, obs.WithComponent("cloudtasks-emulator"), obs.WithLevel(level))

	if *jwksHostPort == "" {
		hp, err := clientopt.CloudTasksJWKSHostPort(*hostPort)
		if err != nil {
			return err
		}
		*jwksHostPort = hp
	}
	srv, err := cloudtasks.New(
		cloudtasks.WithLogger(log),
		cloudtasks.WithDataDir(*dataDir),
		cloudtasks.WithQueueTombstone(*tombstone),
		cloudtasks.WithNameReservation(*reservation),
	)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	grpcLis, err := lc.Listen(ctx, "tcp", *hostPort)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *hostPort, err)
	}
	httpLis, err := lc.Listen(ctx, "tcp", *jwksHostPort)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen %s: %w", *jwksHostPort, err)
	}
	grpcAddr, jwksAddr := grpcLis.Addr().String(), httpLis.Addr().String()
	log.Info("listening",
		"grpc", grpcAddr,
		"jwks_url", "http://"+jwksAddr+clientopt.CloudTasksJWKSPath,
		"healthz", "http://"+jwksAddr+"/healthz",
		"data_dir", *dataDir,
		"env", cloudtasks.EnvHost+"="+grpcAddr,
	)
	if ready != nil {
		ready <- [2]string{grpcAddr, jwksAddr}
	}
	start := time.Now()
	err = srv.Serve(ctx, grpcLis, httpLis)
	log.Info("stopped", "uptime_s", time.Since(start).Seconds())
	return err
}
