package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// filter selects entries (ls and redrive): the store's selection of a bulk
// run, read from and printed as dlqctl's key=value list.
type filter struct{ store.BulkFilter }

// filterKeys are a filter's keys (ls takes one flag each, redrive a
// key=value list), in the order a filter prints.
var filterKeys = []string{"tenant", "status", "category", "reason", "agent", "since", "until"}

func (f filter) String() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("tenant", f.Tenant)
	add("status", string(f.Status))
	add("category", f.Category)
	add("reason", f.Reason)
	add("agent", f.Agent)
	if !f.CreatedFrom.IsZero() {
		add("since", f.CreatedFrom.Format(time.RFC3339))
	}
	if !f.CreatedTo.IsZero() {
		add("until", f.CreatedTo.Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "(all entries)"
	}
	return strings.Join(parts, ",")
}

// set applies one key=value of --filter.
func (f *filter) set(key, value string, now time.Time) error {
	if err := filterArg(key, value); err != nil {
		return err
	}
	switch key {
	case "tenant":
		f.Tenant = value
	case "status":
		if !store.Status(value).Known() {
			return usagef("status %q is not one of %s", value, strings.Join(statusNames(), ", "))
		}
		f.Status = store.Status(value)
	case "category":
		f.Category = value
	case "reason", "reason_code":
		f.Reason = value
	case "agent":
		f.Agent = value
	case "since", "until":
		t, err := parseTime(value, now)
		if err != nil {
			return err
		}
		if key == "since" {
			f.CreatedFrom = t
		} else {
			f.CreatedTo = t
		}
	default:
		return usagef("unknown filter key %q (%s)", key, strings.Join(filterKeys, ", "))
	}
	return nil
}

func statusNames() []string {
	var out []string
	for _, s := range store.AllStatuses {
		out = append(out, string(s))
	}
	return out
}

// parseTime reads RFC 3339 or a duration back from now ("90m", "24h").
func parseTime(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("%q is neither an RFC 3339 time nor a duration such as 24h", v)
}

// scoped applies the caller's tenant limit to a filter: a limited caller
// can only ask for its own tenant.
func (a *app) scoped(f filter) (filter, error) {
	if a.scope == "" {
		return f, nil
	}
	if f.Tenant != "" && f.Tenant != a.scope {
		return f, usagef("this caller is limited to tenant %q; tenant %q is refused", a.scope, f.Tenant)
	}
	f.Tenant = a.scope
	return f, nil
}

// query is the store query of f: newest first, reading view.
func (f filter) query(view store.View) store.Query {
	q := f.Query()
	q.View = view
	return q
}

// query lists up to limit entries matching f, newest first, without
// payloads or history, after the page token. It returns the entries and the
// token of the next page ("" at the end).
func (a *app) query(ctx context.Context, st *store.Store, f filter, token string, limit int) ([]*store.Entry, string, error) {
	q := f.query(store.ListView)
	var err error
	if q.After, err = store.ParseCursor(token); err != nil {
		return nil, "", usagef("--page-token %q is not a token dlqctl printed", token)
	}
	q.Limit = limit
	p, err := st.Entries(ctx, q)
	if err != nil {
		return nil, "", err
	}
	return p.Entries, p.Next.Encode(), nil
}

// filterFlags registers the ls filters on fs.
func filterFlags(fs *flag.FlagSet) map[string]*string {
	m := map[string]*string{}
	for _, k := range filterKeys {
		m[k] = fs.String(k, "", "filter: "+k)
	}
	return m
}

func (a *app) filterFrom(m map[string]*string) (filter, error) {
	var f filter
	for _, k := range filterKeys {
		if v := *m[k]; v != "" {
			if err := f.set(k, v, a.clock()); err != nil {
				return f, err
			}
		}
	}
	return a.scoped(f)
}

func (a *app) cmdLs(ctx context.Context, args []string) error {
	fs := newFlags("ls")
	fm := filterFlags(fs)
	limit := fs.Int("limit", 50, "entries per page (1-1000)")
	token := fs.String("page-token", "", "continue after the page that printed this token")
	asJSON := fs.Bool("json", false, "JSON output")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		return usagef("--limit %d: must be 1-1000", *limit)
	}
	f, err := a.filterFrom(fm)
	if err != nil {
		return err
	}
	st, err := a.listingStore(ctx)
	if err != nil {
		return err
	}
	entries, next, err := a.query(ctx, st, f, *token, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		if entries == nil {
			entries = []*store.Entry{}
		}
		return writeJSON(a.stdout, map[string]any{"entries": entries, "next_page_token": next})
	}
	tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tCATEGORY\tREASON\tTENANT\tAGENT\tREPLAYS\tCREATED")
	for _, e := range entries {
		outf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, e.Status, e.Category, e.ReasonCode, e.Tenant, e.Agent,
			e.Replays, e.CreatedAt.Format(time.RFC3339))
	}
	tw.Flush()
	if next != "" {
		outf(a.stdout, "next page: dlqctl ls ... --page-token %s\n", next)
	}
	if len(entries) == 0 {
		outf(a.stderr, "no entries match %s\n", f)
		if *token == "" {
			a.warnIfEmpty(ctx, st)
		}
	}
	return nil
}

// getScoped reads an entry for the caller: another tenant's entry is
// "not found", with the same message as a missing id.
func (a *app) getScoped(ctx context.Context, st *store.Store, id string, payload bool) (*store.Entry, error) {
	var e *store.Entry
	var err error
	if payload {
		e, err = st.Get(ctx, id)
		if errors.Is(err, store.ErrCorrupt) {
			e, err = st.GetMeta(ctx, id)
			if err == nil && (a.scope == "" || e.Tenant == a.scope) {
				outf(a.stderr, "dlqctl: warning: the stored payload of %s does not match its sha256\n", id)
				e.Payload = nil
			}
		}
	} else {
		e, err = st.GetMeta(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	if a.scope != "" && e.Tenant != a.scope {
		return nil, fmt.Errorf("%w: entry %q", store.ErrNotFound, id)
	}
	return e, nil
}

// chain returns the entries of e's replay chain, root first: its ancestors
// (replay_of) and every entry with its root id.
func (a *app) chain(ctx context.Context, st *store.Store, e *store.Entry) ([]*store.Entry, error) {
	seen := map[string]*store.Entry{e.ID: e}
	cur := e
	for i := 0; i < 20 && cur.ReplayOf != ""; i++ {
		p, err := a.getScoped(ctx, st, cur.ReplayOf, false)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		seen[p.ID] = p
		cur = p
	}
	root := e.RootID
	if root == "" {
		root = e.ID
	}
	// The scope keeps a tenant-limited caller's chain to its own entries.
	p, err := st.Entries(ctx, store.Query{RootID: root, Tenant: a.scope, View: store.ListView, Limit: 100})
	if err != nil {
		return nil, fmt.Errorf("chain of %s: %w", e.ID, err)
	}
	for _, c := range p.Entries {
		if _, ok := seen[c.ID]; !ok {
			seen[c.ID] = c
		}
	}
	out := make([]*store.Entry, 0, len(seen))
	for _, c := range seen {
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y *store.Entry) int {
		if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	return out, nil
}

// showJSON is show's --json document.
type showJSON struct {
	Entry         *store.Entry `json:"entry"`
	Payload       []byte       `json:"payload"` // base64; the original (version 1)
	PayloadBinary bool         `json:"payload_binary"`
	// Versions are the payload's versions, the original first; the next
	// replay publishes ReplayVersion.
	Versions      []store.PayloadVersion `json:"payload_versions"`
	ReplayVersion int                    `json:"replay_version"`
	Chain         []chainLink            `json:"chain"`
}

type chainLink struct {
	ID         string       `json:"id"`
	Status     store.Status `json:"status"`
	ReasonCode string       `json:"reason_code"`
	Strategy   string       `json:"strategy"`
	ReplayOf   string       `json:"replay_of,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
}

func (a *app) cmdShow(ctx context.Context, args []string) error {
	fs := newFlags("show")
	asJSON := fs.Bool("json", false, "JSON output")
	previewBytes := fs.Int("preview", 512, "payload bytes to preview")
	version := fs.Int("version", 0, "print version N of the payload as stored (1: the original) and nothing else")
	id, err := parseEntry(fs, args)
	if err != nil {
		return err
	}
	if err := versionFlag(fs, *version); err != nil {
		return err
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	e, err := a.getScoped(ctx, st, id, true)
	if err != nil {
		return err
	}
	if *version != 0 {
		return a.showVersion(ctx, st, e, *version, *asJSON)
	}
	next, err := e.ReplayVersion()
	if err != nil {
		return err
	}
	chain, err := a.chain(ctx, st, e)
	if err != nil {
		return err
	}
	links := make([]chainLink, 0, len(chain))
	for _, c := range chain {
		links = append(links, chainLink{ID: c.ID, Status: c.Status, ReasonCode: c.ReasonCode, Strategy: c.Strategy, ReplayOf: c.ReplayOf, CreatedAt: c.CreatedAt})
	}
	if *asJSON {
		return writeJSON(a.stdout, showJSON{Entry: e, Payload: e.Payload, PayloadBinary: !isText(e.Payload), Versions: e.Versions(), ReplayVersion: next.N, Chain: links})
	}
	w := a.stdout
	kv := func(k, format string, args ...any) { fmt.Fprintf(w, "%-11s %s\n", k, termf(format, args...)) }
	kv("entry", "%s (event %s)", e.ID, e.EventID)
	kv("status", "%s, replays %d", e.Status, e.Replays)
	kv("tenant", "%s  agent %s  task %s (%s)  key %s", e.Tenant, e.Agent, orDash(e.TaskID), orDash(e.TaskType), orDash(e.IdempotencyKey))
	for _, n := range e.InvalidNames {
		kv("invalid", "%s %s (%d bytes): %s; recorded under the reserved tenant", n.Field, n.Original(), n.Size, n.Problem)
	}
	kv("message", "%s  stream %s #%d  consumer %s", e.Subject, e.Stream, e.StreamSeq, orDash(e.Consumer))
	kv("kind", "%s %v  deliveries %d", e.Kind, e.Kinds, e.Deliveries)
	kv("reason", "%s (route %s)  category %s", e.ReasonCode, orDash(e.ReasonRoute), e.Category)
	kv("decision", "rule %s -> %s, strategy %s, policy %s", orDash(e.Rule), e.Action, orDash(e.Strategy), e.PolicyVersion)
	if p := e.Plan; p.Note != "" || p.DelaySeconds > 0 || p.TargetModel != "" || len(p.Instructions) > 0 || p.AlternateSubject != "" {
		kv("plan", "%s", planText(p))
	}
	if f := e.Failure; f != nil {
		kv("failure", "%s: %s (attempt %d, agent %s, completed steps %v)", f.Code, f.Detail, f.Attempt, orDash(f.Agent), f.CompletedSteps)
	}
	if e.TermReason != "" {
		kv("term", "%s", e.TermReason)
	}
	switch e.Status {
	case store.Scheduled:
		kv("next retry", "%s  task %s", e.NextRetryAt.Format(time.RFC3339), orDash(e.TaskName))
	case store.Replayed:
		kv("next check", "%s  (reconcile looks for the task's completion record)", e.NextRetryAt.Format(time.RFC3339))
	}
	kv("times", "created %s  updated %s%s", e.CreatedAt.Format(time.RFC3339), e.UpdatedAt.Format(time.RFC3339),
		ifSet(!e.ResolvedAt.IsZero(), "  resolved "+e.ResolvedAt.Format(time.RFC3339)))
	switch {
	case e.PayloadMissing:
		kv("payload", "missing (%d B, sha256 %s)%s", e.PayloadSize, orDash(e.PayloadSHA256), ifSet(e.PayloadTruncated, " — truncated in the event"))
	default:
		kv("payload", "%d B, sha256 %s", e.PayloadSize, e.PayloadSHA256)
		writePreview(w, e.Payload, *previewBytes)
	}
	writeVersions(w, e, next)
	if len(e.Headers) > 0 {
		fmt.Fprintln(w, "headers")
		writeHeaders(w, e.Headers)
	}
	fmt.Fprintln(w, "chain (root first)")
	for _, l := range links {
		mark := " "
		if l.ID == e.ID {
			mark = "*"
		}
		outf(w, " %s %s  %s  %s/%s  %s\n", mark, l.ID, l.Status, orDash(l.ReasonCode), orDash(l.Strategy), l.CreatedAt.Format(time.RFC3339))
	}
	writeHistory(w, e.History)
	return nil
}

// writeHistory prints an entry's or a breaker's transitions, oldest first.
func writeHistory(w io.Writer, history []store.Transition) {
	fmt.Fprintln(w, "history")
	for _, h := range history {
		from := h.From
		if from == "" {
			from = "(new)"
		}
		outf(w, "  %s  %s -> %s  by %s%s\n", h.At.Format(time.RFC3339), from, h.To, h.Actor(), ifSet(h.Note != "", "  "+h.Note))
	}
}

func planText(p store.Plan) string {
	var parts []string
	if p.DelaySeconds > 0 {
		parts = append(parts, fmt.Sprintf("delay %.0fs", p.DelaySeconds))
	}
	if p.TargetModel != "" {
		parts = append(parts, "model "+p.TargetModel)
	}
	if p.MaxContextTokens > 0 {
		parts = append(parts, fmt.Sprintf("max context %d", p.MaxContextTokens))
	}
	if p.MaxOutputTokens > 0 {
		parts = append(parts, fmt.Sprintf("max output %d", p.MaxOutputTokens))
	}
	if p.AlternateSubject != "" {
		parts = append(parts, "reroute "+p.AlternateSubject)
	}
	for _, in := range p.Instructions {
		parts = append(parts, fmt.Sprintf("instruction %q", in))
	}
	if p.EscalateTo != "" {
		parts = append(parts, "escalate to "+p.EscalateTo)
	}
	if p.Note != "" {
		parts = append(parts, "note: "+p.Note)
	}
	return strings.Join(parts, "; ")
}

// isText reports whether a payload prints as text.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// writePreview prints up to n bytes: text as is, binary as a hex dump.
func writePreview(w io.Writer, b []byte, n int) {
	if len(b) == 0 {
		return
	}
	cut := b
	if len(cut) > n {
		cut = cut[:n]
	}
	if isText(b) {
		for _, line := range strings.Split(strings.TrimRight(string(cut), "\n"), "\n") {
			outf(w, "  | %s\n", line)
		}
	} else {
		fmt.Fprintln(w, "  (binary)")
		for _, line := range strings.Split(strings.TrimRight(hex.Dump(cut), "\n"), "\n") {
			outf(w, "  %s\n", line)
		}
	}
	if len(b) > n {
		outf(w, "  … %d more bytes (dlqctl show --json for all)\n", len(b)-n)
	}
}

func (a *app) cmdReplay(ctx context.Context, args []string) error {
	fs := newFlags("replay")
	now := fs.Bool("now", false, "run the replay task at once instead of at its scheduled time")
	by := fs.String("by", "", "who acts (default DLQCTL_ACTOR or dlqctl:$USER)")
	id, err := parseEntry(fs, args)
	if err != nil {
		return err
	}
	op, err := a.operator(ctx, *now)
	if err != nil {
		return err
	}
	e, err := op.ReplayNow(ctx, a.scope, id, a.actor(*by))
	if err != nil {
		return err
	}
	how := "due " + e.NextRetryAt.Format(time.RFC3339)
	if *now {
		how = "running now"
	}
	outf(a.stdout, "%s: %s, task %s (%s)\n", e.ID, e.Status, e.TaskName, how)
	return nil
}

// headerFlags collects repeated --set-header K=V.
type headerFlags map[string]string

func (h headerFlags) String() string { return fmt.Sprint(map[string]string(h)) }
func (h headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("%q is not K=V", s)
	}
	h[k] = v
	return nil
}

func (a *app) cmdApprove(ctx context.Context, args []string) error {
	fs := newFlags("approve")
	payloadFile := fs.String("edit-payload", "", "replace the payload with this file's bytes (- for stdin)")
	headers := headerFlags{}
	fs.Var(headers, "set-header", "set a header on the replay, K=V (repeatable)")
	by := fs.String("by", "", "who approves (default DLQCTL_ACTOR or dlqctl:$USER)")
	confirmEmpty := fs.Bool("confirm-empty", false, "confirm that the edited payload is empty or blank")
	confirmInvalid := fs.Bool("confirm-invalid-json", false, "confirm that the edited payload is not JSON where the one it edits is")
	id, err := parseEntry(fs, args)
	if err != nil {
		return err
	}
	ed := operator.Edits{By: a.actor(*by), Confirm: confirmedRisks(*confirmEmpty, *confirmInvalid)}
	if len(headers) > 0 {
		ed.SetHeaders = headers
	}
	if *payloadFile != "" {
		b, err := readFileArg(a, *payloadFile, store.MaxPayload)
		if err != nil {
			return fmt.Errorf("--edit-payload: %w", err)
		}
		ed.Payload = b
	}
	op, err := a.operator(ctx, false)
	if err != nil {
		return err
	}
	e, err := op.Approve(ctx, a.scope, id, ed)
	if errors.Is(err, operator.ErrUnconfirmed) {
		return fmt.Errorf("%w (nothing changed; to approve it as it is, add --confirm-empty or --confirm-invalid-json)", err)
	}
	if err != nil {
		return err
	}
	v, _ := e.ReplayVersion()
	outf(a.stdout, "%s: approved, %s, payload version %d, task %s due %s\n", e.ID, e.Status, v.N, e.TaskName, e.NextRetryAt.Format(time.RFC3339))
	return nil
}

func (a *app) cmdDiscard(ctx context.Context, args []string) error {
	fs := newFlags("discard")
	reason := fs.String("reason", "", "why the entry is discarded (required)")
	by := fs.String("by", "", "who discards (default DLQCTL_ACTOR or dlqctl:$USER)")
	id, err := parseEntry(fs, args)
	if err != nil {
		return err
	}
	if _, err := operator.Reason("a discard", *reason); err != nil {
		return usagef("discard --reason: %v", err)
	}
	op, err := a.operator(ctx, false)
	if err != nil {
		return err
	}
	e, err := op.Discard(ctx, a.scope, id, *reason, a.actor(*by))
	if err != nil {
		return err
	}
	outf(a.stdout, "%s: %s\n", e.ID, e.Status)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ifSet(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}
