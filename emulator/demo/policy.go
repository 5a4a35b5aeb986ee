package main

import (
	"fmt"
	"strings"

	"github.com/jsdlq/jsdlq/shared/triage"
)

// demoPolicy is the default policy with delays of seconds instead of minutes
// (so the demo finishes in time) and one rule of its own: tasks the demo agent
// fails silently (X-Demo-Fail: silent, a NAK without a reason on every
// delivery) stand for transient failures that a retry does not fix — the 11 %
// of the field's transient failures that never resolve (docs/architecture.md,
// "The demo"). Without the rule their reason is `unknown`; with it they are
// transient, get the transient strategy's three replays and are escalated when
// it is spent.
//
// Its predictions need as few tasks per row as a learnable class has
// (minLearnable); predictions false switches them off (the learning phase).
func demoPolicy(predictions bool) ([]byte, error) {
	doc := string(triage.DefaultYAML())
	edits := []struct{ old, new string }{
		{"  min_support: 20\n", fmt.Sprintf("  min_support: %d\n", minLearnable)},
		{"delay: {base: 30s, factor: 2, max: 300s}", "delay: {base: 1s, factor: 2, max: 4s}"},
		{"delay: {base: 10s}", "delay: {base: 1s}"},
		{"delay: {base: 60s}", "delay: {base: 2s}"},
		{"delay: {base: 120s}", "delay: {base: 2s}"},
		{"  - name: transient\n", `  - name: demo-persistent-transient
    match: {headers: {X-Demo-Fail: '^silent$'}}
    set_category: transient
    action: auto_replay
    strategy: transient
  - name: transient
`},
	}
	if !predictions {
		edits = append(edits, struct{ old, new string }{"predictions:\n  enabled: true\n", "predictions:\n  enabled: false\n"})
	}
	for _, e := range edits {
		if !strings.Contains(doc, e.old) {
			return nil, fmt.Errorf("demo policy: the default policy no longer contains %q; update emulator/demo/policy.go", e.old)
		}
		doc = strings.ReplaceAll(doc, e.old, e.new)
	}
	doc = "# jsdlq demo policy: the default with delays of seconds (emulator/demo/policy.go).\n" + doc
	if _, err := triage.ParseOverride([]byte(doc)); err != nil {
		return nil, fmt.Errorf("demo policy: %w", err)
	}
	return []byte(doc), nil
}
