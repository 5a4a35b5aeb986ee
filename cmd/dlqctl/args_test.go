package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/shared/config"
)

// Every command checks its subcommand and positional arguments through
// subcommand, parseNone, parseOne or parseTenantCmd: a missing, unknown or
// extra argument is a usage error (2) naming the command, before any
// client is made (the app here has none, and an empty environment:
// reaching a client would fail with exit 1).
func TestPositionalArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", "extra"}, `ls takes no arguments (got ["extra"])`},
		{[]string{"stats", "extra"}, "stats takes no arguments"},
		{[]string{"health", "extra"}, "health takes no arguments"},
		{[]string{"audit", "--dry-run", "extra"}, "audit takes no arguments"},
		{[]string{"predictions", "extra"}, "predictions takes no arguments"},
		{[]string{"policy", "show", "extra"}, "policy show takes no arguments"},
		{[]string{"breaker", "ls", "extra"}, "breaker ls takes no arguments"},
		{[]string{"redrive", "--filter", "tenant=acme", "extra"}, "redrive takes no arguments"},
		{[]string{"show"}, "show takes one entry id"},
		{[]string{"show", "A.1", "A.2"}, "show takes one entry id"},
		{[]string{"replay", "--now"}, "replay takes one entry id"},
		{[]string{"approve"}, "approve takes one entry id"},
		{[]string{"discard", "--reason", "r"}, "discard takes one entry id"},
		{[]string{"breaker", "show"}, "breaker show takes one tenant"},
		{[]string{"breaker", "close", "--reason", "r"}, "breaker close takes one tenant"},
		{[]string{"breaker", "probe", "A.1", "A.2", "--reason", "r"}, "breaker probe takes one entry id"},
		{[]string{"breaker"}, "usage: dlqctl breaker ls"},
		{[]string{"breaker", "frob"}, `unknown breaker command "frob"`},
		{[]string{"policy", "validate"}, "policy validate takes one FILE"},
		{[]string{"policy", "apply", "a.yaml", "b.yaml"}, "policy apply takes one FILE"},
		{[]string{"policy", "validate", "--json", "a.yaml"}, "flag provided but not defined: -json"},
		{[]string{"policy"}, "usage: dlqctl policy show"},
		{[]string{"policy", "frob"}, `unknown policy command "frob"`},
		{[]string{"tenant-key"}, "usage: dlqctl tenant-key create"},
		{[]string{"tenant-key", "rotate", "acme"}, `unknown tenant-key command "rotate"`},
		{[]string{"tenant-key", "revoke", "acme", "k1", "k2"}, "usage: dlqctl tenant-key create"},
		{[]string{"webhook", "add", "acme"}, "usage: dlqctl webhook add"},
		{[]string{"webhook", "list", "acme", "extra"}, "usage: dlqctl webhook add"},
		{[]string{"webhook", "frob", "acme"}, `unknown webhook command "frob"`},
		// A status filter names one of the store's statuses, exactly.
		{[]string{"ls", "--status", "nope"}, `status "nope" is not one of scheduled, replaying, replayed, recovered, awaiting_approval, quarantined, held, escalated, discarded`},
		{[]string{"redrive", "--filter", "status=Held", "--rate", "1/s", "--dry-run"}, `status "Held" is not one of`},
	} {
		var out, errb bytes.Buffer
		a := &app{stdout: &out, stderr: &errb, stdin: strings.NewReader(""), lookup: config.MapLookup(nil)}
		code := a.run(context.Background(), tc.args)
		a.close()
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("dlqctl %q = %d %q, want %d %q", tc.args, code, errb.String(), exitUsage, tc.want)
		}
	}
}
