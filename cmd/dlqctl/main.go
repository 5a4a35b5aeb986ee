// Command dlqctl is the operator CLI of jsdlq: it lists and inspects
// failure-log entries, replays, approves and discards them, redrives many at
// a controlled rate after showing its plan, shows and overrides tenant
// breakers, shows hourly statistics and tenant health, runs the reconcile
// audit, manages the triage policy and shows the predictions.
//
// It talks to Firestore, Cloud Tasks and NATS directly with Application
// Default Credentials, or to the local emulators through the variables of
// docs/configuration.md (eval "$(make -s env)").
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict or wrong
// status, 5 partial (an interrupted redrive, some items failed).
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

	"github.com/jsdlq/jsdlq/shared/outcome"
)

// Exit codes a shell script can rely on (shared/outcome's).
const (
	exitOK       = outcome.ExitOK
	exitError    = outcome.ExitError
	exitUsage    = outcome.ExitUsage
	exitNotFound = outcome.ExitNotFound
	exitConflict = outcome.ExitConflict
	exitPartial  = outcome.ExitPartial
)

const usage = `usage: dlqctl [--tenant T] COMMAND [FLAGS] [ARGS]

Entries
  ls       [--tenant T] [--status S] [--category C] [--reason R] [--agent A]
           [--since T] [--until T] [--limit N] [--page-token TOKEN] [--json]
  show     ID [--json] [--version N]
  replay   ID [--now]
  approve  ID [--edit-payload FILE] [--set-header K=V]... [--by NAME]
           [--confirm-empty] [--confirm-invalid-json]
  discard  ID --reason TEXT [--by NAME]
  redrive  --filter K=V... --rate N/s [--dry-run] [--yes] [--checkpoint FILE]
           [--include-approver-rules]
         | --resume FILE [--rate N/s] [--dry-run] [--yes]
Breakers
  breaker ls [--json] | show TENANT [--json]
        | close TENANT --reason R [--by NAME] | probe ENTRY --reason R [--by NAME]
Pipeline
  stats    [--hours N] [--json]
  export   --since T [--until T] [--format parquet|ndjson] [--out FILE] [--page N]
           the change feed's rows of the entries that died in the window
  health   [--json]
  audit    [--dry-run] [--json]
         | --recount [--since T] [--until T] [--budget D] [--page N] [--dry-run] [--json]
Policy
  policy show [--json] | diff [FILE] [--json] | validate FILE | apply FILE
         | test FILE|current (EVENT.json | --entry ID) [--chain code:strategy,…] [--json]
  predictions [--json]   the model the agents' pre-flight acts on, and the policy's view of it
Tenant API keys
  tenant-key create TENANT | list TENANT [--json] | revoke TENANT [KEY_ID]
Tenant webhooks
  webhook add TENANT URL | list TENANT [--json] | remove TENANT ID | enable TENANT ID
        | reseal [--json]   seal clear secrets, rewrap sealed ones with the current key

Times (--since, --until) are RFC 3339 or a duration back from now (90m, 24h).
A tenant-limited caller (--tenant T before the command, or DLQCTL_TENANT)
sees and changes only that tenant's entries.
Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict or wrong status,
5 partial (interrupted redrive, failed items).
Environment: GOOGLE_CLOUD_PROJECT, FIRESTORE_EMULATOR_HOST, CLOUD_TASKS_EMULATOR_HOST,
  NATS_URL, NATS_CREDS, TASKS_QUEUE, REPLAY_URL, TASKS_SERVICE_ACCOUNT, WORK_STREAMS,
  ADVISORY_STREAM, RECORD_STREAM, DLQCTL_TENANT, DLQCTL_ACTOR, WEBHOOK_LOCAL, WEBHOOK_DENY_URLS,
  SECRETS_KMS_KEY, SECRETS_LOCAL_KEY_FILE
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{stdout: os.Stdout, stderr: os.Stderr, lookup: os.LookupEnv, stdin: os.Stdin}
	code := a.run(ctx, os.Args[1:])
	stop()
	a.close()
	os.Exit(code)
}

// usageError is a malformed command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitCoder lets a command choose its exit code (redrive's partial).
type exitCoder interface{ ExitCode() int }

// run executes one command line and returns the exit code.
func (a *app) run(ctx context.Context, args []string) int {
	err := a.dispatch(ctx, args)
	if err == nil {
		return exitOK
	}
	code := codeOf(err)
	var ue usageError
	if errors.As(err, &ue) {
		outf(a.stderr, "dlqctl: %v\n(dlqctl help for usage)\n", err)
		return code
	}
	if !errors.Is(err, errSilent) {
		outf(a.stderr, "dlqctl: %v\n", err)
	}
	return code
}

// errSilent marks an error whose explanation was printed already.
var errSilent = errors.New("dlqctl: failed")

func (a *app) dispatch(ctx context.Context, args []string) error {
	g := flag.NewFlagSet("dlqctl", flag.ContinueOnError)
	g.SetOutput(io.Discard)
	tenant := g.String("tenant", "", "limit every command to one tenant")
	if err := g.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(a.stdout, usage)
			return nil
		}
		return usagef("%v", err)
	}
	args = g.Args()
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usage)
		return usageError{"no command"}
	}
	if err := a.setScope(*tenant); err != nil {
		return err
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "ls":
		return a.cmdLs(ctx, rest)
	case "show":
		return a.cmdShow(ctx, rest)
	case "replay":
		return a.cmdReplay(ctx, rest)
	case "approve":
		return a.cmdApprove(ctx, rest)
	case "discard":
		return a.cmdDiscard(ctx, rest)
	case "redrive":
		return a.cmdRedrive(ctx, rest)
	case "breaker":
		return a.cmdBreaker(ctx, rest)
	case "stats":
		return a.cmdStats(ctx, rest)
	case "export":
		return a.cmdExport(ctx, rest)
	case "health":
		return a.cmdHealth(ctx, rest)
	case "audit":
		return a.cmdAudit(ctx, rest)
	case "policy":
		return a.cmdPolicy(ctx, rest)
	case "predictions":
		return a.cmdPredictions(ctx, rest)
	case "tenant-key":
		return a.cmdTenantKey(ctx, rest)
	case "webhook":
		return a.cmdWebhook(ctx, rest)
	case "help", "-h", "--help":
		fmt.Fprint(a.stdout, usage)
		return nil
	}
	return usagef("unknown command %q", cmd)
}

// setScope fixes the tenant the caller is limited to: DLQCTL_TENANT (a
// configured role) wins, and a --tenant naming another tenant is refused; a
// --tenant alone limits this invocation.
func (a *app) setScope(flagTenant string) error {
	role := a.config().Tenant
	for _, t := range [][2]string{{"DLQCTL_TENANT", role}, {"--tenant", flagTenant}} {
		if t[1] == "" {
			continue
		}
		if _, err := storedTenantArg(t[0], t[1]); err != nil {
			return err
		}
	}
	switch {
	case role != "" && flagTenant != "" && flagTenant != role:
		return usagef("this caller is limited to tenant %q (DLQCTL_TENANT); --tenant %q is refused", role, flagTenant)
	case role != "":
		a.scope = role
	default:
		a.scope = flagTenant
	}
	return nil
}

// subcommand runs the subcommand of group that args name, from cmds;
// usage lists them.
func subcommand(ctx context.Context, group, usage string, cmds map[string]func(context.Context, []string) error, args []string) error {
	if len(args) == 0 {
		return usagef("usage: dlqctl %s", usage)
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		return usagef("unknown %s command %q (usage: dlqctl %s)", group, args[0], usage)
	}
	return cmd(ctx, args[1:])
}

// newFlags is a command's flag set; errors are returned, not printed.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseNone parses the flags of a command that takes no positional
// argument.
func parseNone(fs *flag.FlagSet, args []string) error {
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("%s takes no arguments (got %q)", fs.Name(), pos)
	}
	return nil
}

// parseJSONOnly parses the command line of a read command that takes no
// argument and one flag, --json, and reports whether JSON was asked for.
func parseJSONOnly(name string, args []string) (bool, error) {
	fs := newFlags(name)
	asJSON := fs.Bool("json", false, "JSON output")
	err := parseNone(fs, args)
	return *asJSON, err
}

// parseOne parses the flags of a command that takes one positional
// argument (what names it: "entry id") and returns that argument.
func parseOne(fs *flag.FlagSet, args []string, what string) (string, error) {
	pos, err := parseFlags(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", usagef("%s takes one %s", fs.Name(), what)
	}
	return pos[0], nil
}

// parseFlags parses flags that may come before or after positional
// arguments (dlqctl show ID --json).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
