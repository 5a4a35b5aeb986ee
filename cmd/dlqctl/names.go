package main

import (
	"flag"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file reads the identifiers of a command line through their one
// constructor each (the naming rule, docs/contracts.md "Names"): a name no
// entry can have is a usage error (exit 2) before anything is read.

// storedTenantArg reads a tenant an entry can be stored under (a filter, a
// scope, a breaker): the reserved tenant included.
func storedTenantArg(what, s string) (string, error) {
	if _, err := event.ParseStoredTenant(s); err != nil {
		return "", usagef("%s: %v", what, err)
	}
	return s, nil
}

// entryArg reads an entry id: the document id of an event id, as dlqctl
// ls and show print it.
func entryArg(what, s string) (string, error) {
	if _, err := store.EventID(s); err != nil {
		return "", usagef("%s %q is not an entry id (dlqctl ls prints them)", what, s)
	}
	return s, nil
}

// parseEntry parses the flags of a command that takes one entry id.
func parseEntry(fs *flag.FlagSet, args []string) (string, error) {
	id, err := parseOne(fs, args, "entry id")
	if err != nil {
		return "", err
	}
	return entryArg("entry id", id)
}

// filterArg checks the value of a filter key (ls flags, redrive's
// --filter): a tenant an entry can have, an agent by the naming rule, a
// category or reason code as plain visible text.
func filterArg(key, value string) error {
	var err error
	switch key {
	case "tenant":
		_, err = event.ParseStoredTenant(value)
	case "agent":
		_, err = event.ParseAgent(value)
	case "category", "reason", "reason_code":
		err = event.CheckValue(key, value, event.MaxNameBytes)
	}
	if err != nil {
		return usagef("filter %s: %s", key, event.Problem(err))
	}
	return nil
}
