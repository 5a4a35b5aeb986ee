package main

import (
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/shared/store"
)

// Entry ids crafted to reach past the caller's tenant: a path into another
// document or subcollection, an encoded id of another tenant's entry,
// reserved and oversized ids. Each is refused with a message, nothing of the
// other tenant changes, nothing is dispatched, and the command does not
// crash. Ids that are well-formed document ids are "not found" (3); ids that
// are not the document id of an event id (a '/', "..", "__x__", another
// encoding of an id) are a usage error (2) before anything is read.
func TestCraftedIDsStayInTheTenant(t *testing.T) {
	e := newEnv(t)
	e.seed(globexEntries...)
	acme := map[string]string{"DLQCTL_TENANT": "acme"}
	ids := []string{
		"TASKS.2/payload/x",
		"../circuit-breakers/globex",
		"failure-log/TASKS.2",
		"TASKS%2E2",
		"tasks.2",
		" TASKS.2",
		"TASKS.2\x00",
		"__TASKS.2__",
		"..",
		strings.Repeat("T", 2000) + ".2",
	}
	for _, id := range ids {
		for _, args := range [][]string{
			{"show", id},
			{"replay", id, "--now"},
			{"approve", id},
			{"discard", id, "--reason", "not mine"},
		} {
			code, _, stderr := e.run(acme, args...)
			want := exitUsage
			if _, err := store.EventID(id); err == nil {
				want = exitNotFound
			}
			if code != want {
				t.Errorf("acme: dlqctl %q = exit %d (%q), want %d", args, code, stderr, want)
			}
			if stderr == "" {
				t.Errorf("acme: dlqctl %q refused without a message", args)
			}
		}
	}
	e.wantGlobexUntouched("the crafted ids")
}
