// Command stackctl runs the local jsdlq stack (docs/local-stack.md): the
// Firestore and Pub/Sub emulators, nats-server with JetStream, the Cloud Tasks
// emulator, the functions host, the bridge and the console, each in its own
// process group with a log file under .local/log and its state under
// .local/run.
//
//	stackctl up | down | status | logs [-n N] [NAME…] | env
//	stackctl with -- COMMAND…   (emulators on free ports for one command; make test)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: stackctl COMMAND
  up       build and start the local stack, create the topic, push subscription and queue
  down     stop everything 'up' started
  status   show what runs where (exit 3 when something is down)
  logs     print the end of each log: logs [-n LINES] [NAME...]
  env      print the environment variables that point clients at the running stack
           (the ports it was started with; the defaults when none runs)
  with -- COMMAND [ARGS...]
           start the Firestore and Pub/Sub emulators on free ports, run COMMAND
           with FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST set, stop them
Ports and names (environment): FIRESTORE_PORT (8681) PUBSUB_PORT (8682)
  CLOUD_TASKS_PORT (8123) NATS_PORT (4222) FUNCTIONS_PORT (8080) BRIDGE_PORT (8090)
  CONSOLE_PORT (8070)
  GOOGLE_CLOUD_PROJECT (jsdlq-local) TASKS_LOCATION (us-central1)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	s, err := newStack(".")
	if err != nil {
		fmt.Fprintf(stderr, "stackctl: %v\n", err)
		return 1
	}
	switch args[0] {
	case "up":
		err = s.up(ctx, stdout)
	case "down":
		err = s.down(stdout)
	case "status":
		if !s.status(ctx, stdout) {
			return 3
		}
	case "logs":
		fs := flag.NewFlagSet("logs", flag.ContinueOnError)
		n := fs.Int("n", 40, "lines per log")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		err = s.logs(stdout, *n, fs.Args())
	case "env":
		s.printEnv(stdout, stderr)
	case "with":
		rest := args[1:]
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		var code int
		code, err = s.with(ctx, rest, stdout, stderr)
		if err == nil {
			return code
		}
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "stackctl: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "stackctl: %v\n", err)
		var exit *exitError
		if errors.As(err, &exit) {
			return exit.code
		}
		return 1
	}
	return 0
}

type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
