package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// ReasonFilterRejection is the reason code (docs/policy.md) of a task
// published where no consumer listens: the entries the consumer-filter audit
// records.
const ReasonFilterRejection = event.ReasonConsumerFilterRejection

// unconsumed accumulates the consumer-filter finding over the work streams.
type unconsumed struct {
	f       *audit.Finding
	total   int
	oldest  time.Time
	streams []string // "TASKS: agents.x.tasks.y (3), …"
}

// consumers audits each work stream's messages against its consumers'
// filter subjects: a message on a subject that no consumer's filter matches
// is never delivered to anyone, so it neither completes nor dead-letters
// and no advisory ever reports it. The per-subject counts of the stream
// info find those subjects without reading any message; only their
// messages are read (at most MaxUnconsumedMsgs per stream per run). With
// repairs on, each becomes one consumer_filter_rejection entry (payload and
// headers kept) classified by the current policy, like classify would.
//
// The message stays in the work stream: the stream's owner decides what
// to do with it (purge the subject, add a consumer, republish it where a
// consumer listens), and a consumer added later would still receive it.
func (r *run) consumers(ctx context.Context, sec *audit.Section) error {
	js, err := r.jetStream(ctx, true)
	if err != nil {
		return err
	}
	if r.state.Unconsumed == nil {
		r.state.Unconsumed = map[string][]SubjectCursor{}
	}
	var u unconsumed
	err = eachStream(r.h.cfg.WorkStreams, func(name string) error {
		return r.consumersOf(ctx, sec, js, name, &u)
	})
	if u.f != nil {
		u.f.Count = u.total
		oldest := ""
		if !u.oldest.IsZero() {
			oldest = ", oldest published " + u.oldest.Format(time.RFC3339)
		}
		u.f.Message = fmt.Sprintf("messages on subjects no consumer's filter matches, never delivered: %d%s; %s",
			u.total, oldest, strings.Join(u.streams, "; "))
	}
	return err
}

// consumersOf audits one work stream.
func (r *run) consumersOf(ctx context.Context, sec *audit.Section, js jetstream.JetStream, name string, u *unconsumed) error {
	str, err := r.stream(ctx, sec, js, name)
	if err != nil {
		return err
	}
	if str == nil {
		delete(r.state.Unconsumed, name)
		return nil
	}
	cs, err := askJetStream(ctx, r.h, func(ctx context.Context) (streamConsumers, error) { return consumerFilters(ctx, str) })
	filters, n := cs.filters, cs.n
	if err != nil {
		return err
	}
	sec.Add("consumers_"+name, int64(n))
	if n == 0 {
		// Workers may consume through ephemeral consumers that exist only
		// while they run: no consumer now says nothing about the subjects.
		addNote(sec, "stream "+name+" has no consumers, not audited")
		delete(r.state.Unconsumed, name)
		return nil
	}
	if slices.Contains(filters, "") || slices.Contains(filters, ">") {
		// A consumer receives everything: no need to list the subjects.
		delete(r.state.Unconsumed, name)
		return nil
	}
	info, err := askJetStream(ctx, r.h, func(ctx context.Context) (*jetstream.StreamInfo, error) {
		return str.Info(ctx, jetstream.WithSubjectFilter(">"))
	})
	if err != nil {
		return fmt.Errorf("subjects of %s: %w", name, err)
	}
	var unmatched []string
	for subj := range info.State.Subjects {
		if !slices.ContainsFunc(filters, func(f string) bool { return f == "" || triage.SubjectMatches(f, subj) }) {
			unmatched = append(unmatched, subj)
		}
	}
	slices.Sort(unmatched)
	sec.Add("subjects_"+name, int64(len(info.State.Subjects)))
	cursors := map[string]*SubjectCursor{}
	for _, c := range r.state.Unconsumed[name] {
		// Subjects now matched or emptied are forgotten (a later message on
		// them starts over: recording is idempotent), and so is a cursor
		// past the stream's end (the stream was recreated).
		if slices.Contains(unmatched, c.Subject) && uint64(max(c.Seq, 0)) <= info.State.LastSeq {
			cursors[c.Subject] = &c
		}
	}
	for _, subj := range unmatched {
		if cursors[subj] == nil {
			cursors[subj] = &SubjectCursor{Subject: subj}
		}
	}
	defer func() {
		cs := make([]SubjectCursor, 0, len(cursors))
		for _, subj := range slices.Sorted(maps.Keys(cursors)) {
			if c := cursors[subj]; c.First > 0 {
				cs = append(cs, *c)
			}
		}
		r.state.Unconsumed[name] = cs
	}()
	// The subjects whose cursor is furthest behind go first, so a budget
	// spent on one subject does not starve the others.
	slices.SortStableFunc(unmatched, func(a, b string) int { return cmp.Compare(cursors[a].Seq, cursors[b].Seq) })

	w := subjectWalk{r: r, str: str, stream: name, budget: r.h.cfg.MaxUnconsumedMsgs, direct: info.Config.AllowDirect}
	// First every subject's oldest message (known from earlier runs, or
	// read now), for the grace, the count and the examples; then their
	// messages, as far as the budget goes.
	var counted []string
	var walk []string
	firsts := map[string]*jetstream.RawStreamMsg{}
	unknown := 0
	for _, subj := range unmatched {
		c := cursors[subj]
		if c.First == 0 || uint64(c.First) < info.State.FirstSeq {
			// Unknown, or removed by the stream's limits since.
			c.First, c.FirstAt = 0, time.Time{}
			if w.budget > 0 && !r.over() {
				first, err := w.next(ctx, subj, info.State.FirstSeq)
				if err != nil {
					return err
				}
				if first == nil {
					continue // removed since the stream info
				}
				firsts[subj] = first
				c.First, c.FirstAt = int64(first.Sequence), first.Time.UTC()
			}
		}
		if c.First > 0 && r.now().Sub(c.FirstAt) < r.h.cfg.Grace {
			// A consumer for a new subject may be created just after its
			// first message was published.
			sec.Add("pending_"+name, int64(info.State.Subjects[subj]))
			continue
		}
		count := int(info.State.Subjects[subj])
		sec.Add("unconsumed_"+name, int64(count))
		counted = append(counted, fmt.Sprintf("%s (%d)", subj, count))
		if u.f == nil {
			u.f = r.finding(audit.AlertUnconsumedMessages, SectionConsumers, "", "")
			u.f.Repair = &audit.Repair{Action: "record_entry"}
		}
		u.total += count
		if c.First == 0 {
			unknown++ // its age is read by a later run; counted all the same
			continue
		}
		u.f.Example(event.ID(name, uint64(c.First)))
		if u.oldest.IsZero() || c.FirstAt.Before(u.oldest) {
			u.oldest = c.FirstAt
		}
		walk = append(walk, subj)
	}
	if unknown > 0 {
		addNote(sec, fmt.Sprintf("%s: %d unconsumed subjects not read yet (budget)", name, unknown))
	}
	partial := unknown > 0
	for _, subj := range walk {
		c := cursors[subj]
		if uint64(max(c.Seq, 0)) >= info.State.LastSeq {
			continue // nothing appended to the stream since
		}
		m := firsts[subj]
		if m == nil || m.Sequence <= uint64(max(c.Seq, 0)) {
			if r.over() || w.budget <= 0 {
				partial = true
				break
			}
			if m, err = w.next(ctx, subj, uint64(max(c.Seq+1, c.First))); err != nil {
				return err
			}
		}
		err := w.record(ctx, u.f.Repair, subj, m, func(seq uint64) { c.Seq = int64(seq) })
		if errors.Is(err, errBudget) {
			partial = true
			break
		}
		if err != nil {
			return err
		}
	}
	if len(counted) > 0 {
		slices.Sort(counted)
		shown := counted[:min(len(counted), audit.MaxExamples)]
		more := ""
		if len(counted) > len(shown) {
			more = fmt.Sprintf(", and %d more subjects", len(counted)-len(shown))
		}
		u.streams = append(u.streams, fmt.Sprintf("%s (consumers' filters %s): %s%s", name, strings.Join(filters, " "), strings.Join(shown, ", "), more))
	}
	if partial {
		return errBudget
	}
	return nil
}

// streamConsumers is what a stream's consumers receive: their filter
// subjects ("" for a consumer without a filter, which receives everything)
// and how many consumers there are.
type streamConsumers struct {
	filters []string
	n       int
}

// consumerFilters lists a stream's consumers.
func consumerFilters(ctx context.Context, str jetstream.Stream) (streamConsumers, error) {
	var c streamConsumers
	lister := str.ListConsumers(ctx)
	for ci := range lister.Info() {
		c.n++
		if cfg := ci.Config; len(cfg.FilterSubjects) > 0 {
			c.filters = append(c.filters, cfg.FilterSubjects...)
		} else {
			c.filters = append(c.filters, cfg.FilterSubject)
		}
	}
	if err := lister.Err(); err != nil {
		return streamConsumers{}, fmt.Errorf("consumers of %s: %w", str.CachedInfo().Config.Name, err)
	}
	slices.Sort(c.filters)
	c.filters = slices.Compact(c.filters)
	return c, nil
}

// subjectWalk reads one stream's messages subject by subject, within the
// run's message budget for the stream.
type subjectWalk struct {
	r      *run
	str    jetstream.Stream
	stream string
	budget int
	direct bool
}

// next returns the first message on subj at or after seq, nil when there
// is none.
func (w *subjectWalk) next(ctx context.Context, subj string, seq uint64) (*jetstream.RawStreamMsg, error) {
	w.budget--
	m, err := askJetStream(ctx, w.r.h, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return w.str.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject(subj))
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s subject %s after seq %d: %w", w.stream, subj, seq, err)
	}
	if w.direct {
		m.Header = event.DropDirectGetHeaders(m.Header)
	} else if len(m.Header) == 0 {
		m.Header = nil
	}
	return m, nil
}

// record walks subj from m on, a page at a time, recording each message old
// enough that has no entry yet; done is told the last sequence handled.
func (w *subjectWalk) record(ctx context.Context, rp *audit.Repair, subj string, m *jetstream.RawStreamMsg, done func(uint64)) error {
	r := w.r
	for m != nil {
		var page []*jetstream.RawStreamMsg
		for m != nil && len(page) < r.h.cfg.PageSize && r.now().Sub(m.Time) >= r.h.cfg.Grace {
			page = append(page, m)
			if r.over() || w.budget <= 0 {
				m = nil
				break
			}
			next, err := w.next(ctx, subj, m.Sequence+1)
			if err != nil {
				return err
			}
			m = next
		}
		if len(page) == 0 {
			return nil // the rest is younger than the grace: the next run
		}
		ids := make([]string, len(page))
		for i, p := range page {
			id, err := store.EntryID(event.ID(w.stream, p.Sequence))
			if err != nil {
				return fmt.Errorf("entry id of %s: %w", event.ID(w.stream, p.Sequence), err)
			}
			ids[i] = id
		}
		entries, err := r.h.store.EntriesByID(ctx, ids)
		if err != nil {
			return err
		}
		for i, p := range page {
			if entries[ids[i]] == nil {
				rp.Planned++
				if !r.dry {
					w.recordOne(ctx, rp, ids[i], p)
				}
			}
		}
		done(page[len(page)-1].Sequence)
		if r.over() || w.budget <= 0 {
			return errBudget
		}
	}
	return nil
}

// recordOne records message m as a consumer_filter_rejection entry,
// classified as classify classifies an explicit record, and schedules its
// replay when the policy asks for one.
func (w *subjectWalk) recordOne(ctx context.Context, rp *audit.Repair, id string, m *jetstream.RawStreamMsg) {
	r := w.r
	now := r.now()
	rec := event.Record{
		Meta: event.RecordMeta{Stream: w.stream, StreamSeq: m.Sequence, Subject: m.Subject, PublishedAt: m.Time,
			Failure: event.Failure{Code: ReasonFilterRejection, RecordedAt: now,
				Detail: fmt.Sprintf("no consumer of stream %s matches subject %s", w.stream, m.Subject)}},
		Headers: m.Header, Data: m.Data,
	}
	ev := rec.Event(r.h.cfg.Conventions, now)
	headers, err := event.DecodeHeaders(ev.Message.Headers)
	if err != nil {
		rp.Fail(fmt.Errorf("%s: headers: %w", ev.ID, err))
		return
	}
	e := store.NewEntry(id, ev, headers, r.h.cfg.Conventions)
	// A replay sent to a subject nobody consumes is linked to the entry it
	// replays, as classify links a replay's death.
	chain, _, err := r.h.store.LinkReplay(ctx, e, headers)
	if err != nil {
		rp.Fail(err)
		return
	}
	in, err := e.PolicyInput()
	if err != nil {
		rp.Fail(err)
		return
	}
	e.Decide(r.h.pol.Current(ctx).Evaluate(in, chain), now)
	res, err := r.h.store.Record(ctx, e, By)
	switch {
	case err != nil:
		rp.Fail(fmt.Errorf("record %s: %w", ev.ID, err))
		return
	case !res.Created:
		rp.Skipped++
		rp.Note(ev.ID + ": its entry was created meanwhile")
		return
	}
	rp.Done++
	cur := res.Entry
	if res.HandOff != nil {
		rp.Note(fmt.Sprintf("%s: the replayed entry keeps its own completion checks (%v)", cur.ID, res.HandOff))
	}
	r.h.log.InfoContext(ctx, "reconcile: unconsumed message recorded", "run_id", r.rep.RunID, "event_id", event.Wire(ev.ID), "entry_id", id,
		"subject", event.Wire(m.Subject), "tenant", event.Wire(cur.Tenant), "category", cur.Category, "action", cur.Action, "status", cur.Status)
	if cur.Status == store.Scheduled && cur.TaskName != "" && r.h.tasks != nil {
		if _, _, err := r.h.tasks.Schedule(ctx, tasks.Request{EntryID: cur.ID, Attempt: cur.Replays + 1, At: cur.NextRetryAt}); err != nil {
			// The entry is scheduled; the tasks section recreates its task.
			rp.Note(fmt.Sprintf("%s: replay task not created (%v); the missing-task repair creates it", cur.ID, err))
		}
	}
}
