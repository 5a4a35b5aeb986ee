// Package chaos holds fault scenarios run against the real binaries on a
// private local stack (free ports, never the `make up` ports): processes are
// killed, restarted, paused and fed duplicates while dead messages flow, and
// each scenario counts events in, entries out, replays published, duplicate
// executions and losses. The scenarios are tests (chaos_test.go):
//
//	go test ./internal/chaos                      # short form, part of make test
//	JSDLQ_CHAOS=full go test -v ./internal/chaos  # full counts (make chaos)
//
// With JSDLQ_CHAOS_REPORT=path the measured table replaces the block between
// the chaos markers in that file (docs/RELIABILITY.md).
package chaos
