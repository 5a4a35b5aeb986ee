package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/firestore"
)

// This file holds the typed queries over failure-log: filters, an order, a
// projection and a keyset cursor. Every caller (dlqctl, reconcile, the demo)
// lists and counts entries through Entries and Count; the field names stay
// in here, next to the composite indexes they need (docs/storage.md).

// Errors of a query.
var (
	ErrBadQuery  = errors.New("store: bad query")
	ErrBadCursor = errors.New("store: not a page cursor the store made")
)

// Order is the order of a query's entries. Each order ends with the
// document id, so that entries with equal times keep one order and a cursor
// names one position.
type Order int

// Orders.
const (
	// NewestFirst is created_at descending, the default. With equality
	// filters it needs the (field, created_at DESC) indexes.
	NewestFirst Order = iota
	// OldestFirst is created_at ascending (single-field index; with
	// equality filters only through the merged indexes of Firestore, so
	// reconcile and the demo use it with a created_at range alone).
	OldestFirst
	// DueFirst is next_retry_at ascending: the entries of a status in the
	// order their replays fall due (index status + next_retry_at). It
	// takes no created_at range.
	DueFirst
)

// View is the set of fields a query reads.
type View int

// Views.
const (
	// FullView reads whole entries, inline payloads included (never the
	// payload chunks: Get or LoadPayload fetch those).
	FullView View = iota
	// ListView is what a listing shows: no payload, headers, failure
	// record or history.
	ListView
	// ScanView is what an audit reads: the status machine with its
	// history, but no payload, headers or failure record, so paging
	// through thousands of entries never downloads inline payloads (up
	// to 256 KiB each).
	ScanView
	// ExportView is what the change feed's export reads (ChangeRowOf): the
	// scan's fields with the headers (the predictions), the plan (the
	// payload's opt-in) and the inline payload.
	ExportView
)

var viewFields = map[View][]string{
	ListView: {"event_id", "stream", "stream_seq", "subject", "tenant", "agent", "task_id", "task_type",
		"idempotency_key", "kind", "category", "reason_code", "rule", "action", "strategy", "status", "replays",
		"next_retry_at", "task_name", "replay_of", "root_id", "payload_size", "policy_version", "created_at", "updated_at"},
	ScanView:   scanFields,
	ExportView: append(append([]string(nil), scanFields...), "headers", "plan", "payload", "payload_chunks"),
}

// scanFields are ScanView's fields.
var scanFields = []string{"event_id", "stream", "consumer", "stream_seq", "subject", "tenant", "agent", "task_id", "task_type",
	"idempotency_key", "kind", "category", "reason_code", "action", "strategy", "status", "replays",
	"next_retry_at", "task_name", "breaker_probe", "published_seq", "replay_of", "root_id", "history", "task_tenant",
	"published_at", "created_at", "updated_at", "resolved_at", "expire_at",
	// What a move's row of the change feed carries (ChangeRowOf).
	"policy_version", "payload_size", "payload_sha256"}

// Query selects failure-log entries. Every filter that is set must match
// (an equality, or the created_at range [CreatedFrom, CreatedTo)); the zero
// Query matches every entry.
type Query struct {
	Tenant   string
	Status   Status
	Category string
	Reason   string // reason_code
	Agent    string
	TaskType string
	TaskID   string
	RootID   string
	// Statuses selects the entries in any of them (Firestore's "in", at
	// most MaxStatuses), instead of one Status. Its filter has Status's
	// shape (an equality on status, to the indexes), so it is served by
	// the indexes Status is.
	Statuses []Status
	// FoldCase matches Tenant and Agent whatever their case (the
	// entries' tenant_fold and agent_fold, FoldName): what an operator
	// types. Entries written before those fields existed get them with
	// their next write; until then only an exact filter finds them.
	FoldCase bool
	// CreatedFrom and CreatedTo bound created_at: from inclusive, to
	// exclusive; zero is unbounded.
	CreatedFrom, CreatedTo time.Time

	Order Order
	View  View
	// Limit is the page size (Entries only; at least 1).
	Limit int
	// After continues after the page whose Next it is; zero starts at the
	// top. A cursor belongs to the order it was made in.
	After Cursor
	// DueBy, with DueFirst only, leaves out the entries whose
	// next_retry_at is after it, so a scan reads only what is due (the
	// same index as the order); zero leaves none out.
	DueBy time.Time
}

// MaxStatuses is the most statuses one Query selects (Firestore's limit of
// the values of an "in" filter).
const MaxStatuses = 30

// Page is one page of a query.
type Page struct {
	Entries []*Entry
	// Next continues the query after this page; zero when no entry
	// follows.
	Next Cursor
}

// Entries returns a page of the entries q selects, in q's order, without
// payload chunks.
func (s *Store) Entries(ctx context.Context, q Query) (Page, error) {
	if q.Limit < 1 {
		return Page{}, fmt.Errorf("%w: limit %d, want at least 1", ErrBadQuery, q.Limit)
	}
	fq, err := s.filter(q)
	if err != nil {
		return Page{}, err
	}
	field, dir := "created_at", firestore.Desc
	switch q.Order {
	case OldestFirst:
		dir = firestore.Asc
	case DueFirst:
		field, dir = "next_retry_at", firestore.Asc
	}
	fq = fq.OrderBy(field, dir).OrderBy(firestore.DocumentID, dir)
	if !q.After.IsZero() {
		fq = fq.StartAfter(q.After.At, q.After.ID)
	}
	if fields, ok := viewFields[q.View]; ok {
		fq = fq.Select(fields...)
	}
	entries, more, err := pageDocs(ctx, s, fq, q.Limit, FailureLog+" by "+field, decodeEntry)
	if err != nil {
		return Page{}, err
	}
	if q.View != FullView {
		for _, e := range entries {
			e.view = q.View // what TransitionSeen may move it by
		}
	}
	p := Page{Entries: entries}
	if more {
		last := entries[len(entries)-1]
		p.Next = Cursor{At: last.CreatedAt, ID: last.ID}
		if q.Order == DueFirst {
			p.Next.At = last.NextRetryAt
		}
	}
	return p, nil
}

// Count counts the entries q selects (its filters; order, view, limit and
// cursor do not matter) with one aggregation query, billed as one read per
// 1 000 entries counted.
func (s *Store) Count(ctx context.Context, q Query) (int64, error) {
	fq, err := s.filter(q)
	if err != nil {
		return 0, err
	}
	return s.count(ctx, fq, FailureLog)
}

// EntriesByIDPrefix lists, in id order, at most limit entries whose id
// begins with prefix (an entry id as the console shows it, or its start):
// a range on the document id, which Firestore's automatic index serves.
func (s *Store) EntriesByIDPrefix(ctx context.Context, prefix string, limit int) ([]*Entry, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", ErrBadQuery, limit)
	}
	if prefix == "" || len(prefix) > MaxIDBytes || strings.Trim(prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_%") != "" {
		return nil, fmt.Errorf("%w: %q is not the start of an entry id", ErrBadQuery, prefix)
	}
	coll := s.fs.Collection(FailureLog)
	// Every id character sorts below U+F8FF, so the range holds exactly
	// the ids that begin with prefix.
	fq := coll.Where(firestore.DocumentID, ">=", coll.Doc(prefix)).Where(firestore.DocumentID, "<", coll.Doc(prefix+"\uf8ff")).
		OrderBy(firestore.DocumentID, firestore.Asc).Select(viewFields[ListView]...)
	entries, _, err := pageDocs(ctx, s, fq, limit, FailureLog+" by id prefix", decodeEntry)
	for _, e := range entries {
		e.view = ListView
	}
	return entries, err
}

func (s *Store) filter(q Query) (firestore.Query, error) {
	fq := s.fs.Collection(FailureLog).Query
	switch q.Order {
	case NewestFirst, OldestFirst:
		if !q.DueBy.IsZero() {
			return fq, fmt.Errorf("%w: a due time needs the due order", ErrBadQuery)
		}
	case DueFirst:
		if !q.CreatedFrom.IsZero() || !q.CreatedTo.IsZero() {
			return fq, fmt.Errorf("%w: a created_at range cannot be ordered by next_retry_at", ErrBadQuery)
		}
		if !q.DueBy.IsZero() {
			fq = fq.Where("next_retry_at", "<=", q.DueBy)
		}
	default:
		return fq, fmt.Errorf("%w: unknown order %d", ErrBadQuery, q.Order)
	}
	if _, ok := viewFields[q.View]; !ok && q.View != FullView {
		return fq, fmt.Errorf("%w: unknown view %d", ErrBadQuery, q.View)
	}
	tenant, agent := struct{ field, value string }{"tenant", q.Tenant}, struct{ field, value string }{"agent", q.Agent}
	if q.FoldCase {
		tenant.field, tenant.value = "tenant_fold", FoldName(q.Tenant)
		agent.field, agent.value = "agent_fold", FoldName(q.Agent)
	}
	for _, eq := range [...]struct{ field, value string }{
		tenant, {"status", string(q.Status)}, {"category", q.Category}, {"reason_code", q.Reason},
		agent, {"task_type", q.TaskType}, {"task_id", q.TaskID}, {"root_id", q.RootID},
	} {
		if eq.value == "" {
			continue
		}
		// Firestore's client cannot send a string that is not UTF-8:
		// such a query fails inside it and is retried until the caller
		// gives up, so it is refused here, before any I/O.
		if !utf8.ValidString(eq.value) || len(eq.value) > MaxIDBytes {
			return fq, fmt.Errorf("%w: %s is not UTF-8 of at most %d bytes", ErrBadQuery, eq.field, MaxIDBytes)
		}
		fq = fq.Where(eq.field, "==", eq.value)
	}
	if len(q.Statuses) > 0 {
		if q.Status != "" || len(q.Statuses) > MaxStatuses {
			return fq, fmt.Errorf("%w: statuses: 1 to %d of them, and not with a status", ErrBadQuery, MaxStatuses)
		}
		in := make([]string, len(q.Statuses))
		for i, st := range q.Statuses {
			if !st.Known() {
				return fq, fmt.Errorf("%w: unknown status %q", ErrBadQuery, st)
			}
			in[i] = string(st)
		}
		fq = fq.Where("status", "in", in)
	}
	if !q.CreatedFrom.IsZero() {
		fq = fq.Where("created_at", ">=", q.CreatedFrom)
	}
	if !q.CreatedTo.IsZero() {
		fq = fq.Where("created_at", "<", q.CreatedTo)
	}
	return fq, nil
}

func (s *Store) count(ctx context.Context, q firestore.Query, what string) (int64, error) {
	res, err := q.NewAggregationQuery().WithCount("n").Get(ctx)
	s.read(1)
	if err != nil {
		return 0, fmt.Errorf("firestore count %s: %w", what, err)
	}
	switch v := res["n"].(type) {
	case int64:
		return v, nil
	case interface{ GetIntegerValue() int64 }:
		return v.GetIntegerValue(), nil
	}
	return 0, fmt.Errorf("firestore count %s: unexpected result %T", what, res["n"])
}

// Cursor is where a page ended: the order field's value and the document
// id of its last entry. The zero cursor is the top. Reconcile keeps its
// cursors in its state document; dlqctl prints them as page tokens
// (Encode, ParseCursor).
type Cursor struct {
	At time.Time `firestore:"at" json:"at"`
	ID string    `firestore:"id" json:"id"`
}

// IsZero reports whether the cursor is at the top.
func (c Cursor) IsZero() bool { return c.ID == "" }

// Encode is the cursor as a page token ("" for the top).
func (c Cursor) Encode() string {
	if c.IsZero() {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.At.UnixNano(), 10) + "|" + c.ID))
}

// ParseCursor reads a page token Encode made ("" is the top). Anything
// else is ErrBadCursor, and so is a token naming a document id no entry can
// have (EntryID's encoding), so a forged token cannot point a query at
// another collection's path or a hand-made document.
func ParseCursor(token string) (Cursor, error) {
	if token == "" {
		return Cursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return Cursor{}, fmt.Errorf("%w: %q", ErrBadCursor, token)
	}
	ns, id, ok := strings.Cut(string(b), "|")
	n, perr := strconv.ParseInt(ns, 10, 64)
	if !ok || perr != nil || id == "" {
		return Cursor{}, fmt.Errorf("%w: %q", ErrBadCursor, token)
	}
	if _, err := EventID(id); err != nil {
		return Cursor{}, fmt.Errorf("%w: %q names no entry id", ErrBadCursor, token)
	}
	return Cursor{At: time.Unix(0, n).UTC(), ID: id}, nil
}
