package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jsdlq/jsdlq/shared/agentkit"
	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// queueListing is the queue's replay tasks by task id, when the listing got
// to the end of the queue within its bound.
type queueListing struct {
	present  map[string]time.Time
	complete bool
}

func (r *run) listQueue(ctx context.Context, sec *audit.Section) (queueListing, error) {
	q := queueListing{present: map[string]time.Time{}, complete: true}
	n := 0
	err := r.h.tasks.Each(ctx, func(name string, at time.Time) bool {
		n++
		if n > r.h.cfg.MaxQueueTasks {
			q.complete = false
			return false
		}
		q.present[shortTask(name)] = at
		return true
	})
	sec.Add("queue_tasks", int64(len(q.present)))
	return q, err
}

// tasksAudit compares the queue with the scheduled entries: tasks whose entry
// no longer waits for them are orphans (deleted), scheduled entries without
// their task get it back.
func (r *run) tasksAudit(ctx context.Context, sec *audit.Section) error {
	if r.h.tasks == nil {
		return fmt.Errorf("%w: no Cloud Tasks client", errSkipped)
	}
	q, err := r.listQueue(ctx, sec)
	if err != nil {
		return err
	}
	if !q.complete {
		sec.Note = fmt.Sprintf("queue holds more than %d tasks: orphans checked among the first ones, missing tasks asked one by one", r.h.cfg.MaxQueueTasks)
	}
	if err := r.orphans(ctx, sec, q); err != nil {
		return err
	}
	return r.missing(ctx, sec, q)
}

func (r *run) orphans(ctx context.Context, sec *audit.Section, q queueListing) error {
	byEntry := map[string][]string{}
	var ids []string
	for name := range q.present {
		id, _, err := tasks.ParseName(name)
		if err != nil {
			sec.Add("foreign_tasks", 1) // not a replay task of ours: left alone
			continue
		}
		if _, ok := byEntry[id]; !ok {
			ids = append(ids, id)
		}
		byEntry[id] = append(byEntry[id], name)
	}
	var f *audit.Finding
	now := r.now()
	for start := 0; start < len(ids); start += r.h.cfg.PageSize {
		if r.over() {
			return errBudget
		}
		chunk := ids[start:min(len(ids), start+r.h.cfg.PageSize)]
		entries, err := r.h.store.EntriesByID(ctx, chunk)
		if err != nil {
			return err
		}
		for _, id := range chunk {
			e := entries[id]
			for _, name := range byEntry[id] {
				why := orphanReason(e, name, now, r.h.cfg.Grace)
				if why == "" {
					continue
				}
				f = r.repairing(f, audit.AlertOrphanTask, SectionTasks, "replay tasks in the queue whose entry does not wait for them (entry missing, in another status, or waiting for another task)", "delete_task")
				if !r.plan(f, name) {
					continue
				}
				if err := r.h.tasks.Delete(ctx, name); err != nil {
					f.Repair.Fail(err)
					continue
				}
				f.Repair.Done++
				r.h.log.InfoContext(ctx, "reconcile: orphan task deleted", "run_id", r.rep.RunID, "task", name, "entry_id", id, "reason", why)
			}
		}
		sec.Add("tasks_checked", int64(len(chunk)))
	}
	return nil
}

// orphanReason says why a task is an orphan, or "" when its entry still
// waits for it (scheduled under its name, or replaying: the task is being
// dispatched; or recovered by it: its redelivery finishes what the recovery
// does after the move, store.MarkRecovered, and then ends).
func orphanReason(e *store.Entry, task string, now time.Time, grace time.Duration) string {
	switch {
	case e == nil:
		return "entry does not exist"
	case now.Sub(e.UpdatedAt) < grace:
		return "" // changed just now: let the replay or classify finish
	case shortTask(e.TaskName) != task:
		return fmt.Sprintf("entry waits for task %q", e.TaskName)
	case !e.Status.KeepsTask():
		return "entry is " + string(e.Status)
	}
	return ""
}

// missing pages through the scheduled entries from the saved cursor.
func (r *run) missing(ctx context.Context, sec *audit.Section, q queueListing) error {
	var f *audit.Finding
	return r.eachEntry(ctx, sec, store.Scheduled, &r.state.Tasks, func(e *store.Entry, now time.Time) error {
		if now.Sub(e.UpdatedAt) < r.h.cfg.Grace {
			sec.Add("scheduled_recent", 1)
			return nil
		}
		name := shortTask(e.TaskName)
		if name != "" {
			if _, listed := q.present[name]; listed {
				return nil
			}
			// Not in the listing (taken at the start of the section, or
			// incomplete): ask, since classify may have created it after
			// the listing.
			present, err := r.h.tasks.Exists(ctx, name)
			if err != nil {
				return err
			}
			if present {
				return nil
			}
		}
		f = r.repairing(f, audit.AlertMissingTask, SectionTasks, "scheduled entries whose replay task is not in the queue", "recreate_task")
		if r.plan(f, e.ID) {
			r.recreate(ctx, f.Repair, e)
		}
		return nil
	})
}

// recreate gives a scheduled entry its task back: under the same name when
// that name was never used (ALREADY_EXISTS then means someone else just made
// it, which is fine), else under the next attempt's name, moved onto the
// entry first in a transaction that checks the entry still waits for the old
// name. Entry first, task second: a crash in between leaves a scheduled
// entry whose (never created) task the next run creates.
func (r *run) recreate(ctx context.Context, rp *audit.Repair, e *store.Entry) {
	name := shortTask(e.TaskName)
	attempt := e.Replays + 1
	if name != "" {
		if _, n, err := tasks.ParseName(name); err == nil {
			attempt = n
		}
	}
	for try := 0; try < 3; try++ {
		if name != "" {
			_, created, err := r.h.tasks.Schedule(ctx, tasks.Request{EntryID: e.ID, Attempt: attempt, At: e.NextRetryAt})
			if err != nil {
				rp.Fail(fmt.Errorf("entry %s: %w", e.ID, err))
				return
			}
			exists := true
			if !created {
				// ALREADY_EXISTS: present now (created meanwhile), or the
				// name is reserved by a task that ran or was deleted.
				if exists, err = r.h.tasks.Exists(ctx, name); err != nil {
					rp.Fail(fmt.Errorf("entry %s: %w", e.ID, err))
					return
				}
			}
			if exists {
				rp.Done++
				r.h.log.InfoContext(ctx, "reconcile: missing task recreated", "run_id", r.rep.RunID, "entry_id", e.ID, "task", name, "created", created)
				return
			}
			attempt++
		}
		next := tasks.Name(e.ID, attempt)
		cur, err := r.h.store.RequeueTask(ctx, e.ID, store.MoveRequeue.Only(store.Scheduled), e.TaskName, next, e.NextRetryAt, By,
			fmt.Sprintf("task %q missing and its name used; rescheduled as %q", name, next))
		if !applied(rp, e.ID, err) {
			return
		}
		e, name = cur, next
	}
	rp.Fail(fmt.Errorf("entry %s: three task names in a row are already used", e.ID))
}

// replaying finds entries stuck in replaying and re-queues them when their
// task is gone.
func (r *run) replaying(ctx context.Context, sec *audit.Section) error {
	if r.h.tasks == nil {
		return fmt.Errorf("%w: no Cloud Tasks client", errSkipped)
	}
	var f *audit.Finding
	return r.eachEntry(ctx, sec, store.Replaying, &r.state.Replaying, func(e *store.Entry, now time.Time) error {
		if now.Sub(e.UpdatedAt) < r.h.cfg.StuckAfter {
			return nil
		}
		f = r.repairing(f, audit.AlertStuckReplaying, SectionReplaying, fmt.Sprintf("entries replaying for more than %s", r.h.cfg.StuckAfter), "requeue")
		f.Example(e.ID)
		name := shortTask(e.TaskName)
		if name != "" {
			present, err := r.h.tasks.Exists(ctx, name)
			if err != nil {
				f.Repair.Fail(err)
				return nil
			}
			if present {
				// Cloud Tasks is still retrying it; the retry resumes the
				// claim. A second task would publish twice.
				f.Repair.Note(e.ID + ": its task " + name + " is still in the queue (retrying); left to it")
				return nil
			}
		}
		f.Repair.Planned++
		if r.dry {
			return nil
		}
		attempt := e.Replays + 1
		if _, n, err := tasks.ParseName(name); err == nil {
			attempt = n + 1
		}
		next := tasks.Name(e.ID, attempt)
		cur, err := r.h.store.RequeueTask(ctx, e.ID, store.MoveRequeue.Only(store.Replaying), e.TaskName, next, now, By,
			fmt.Sprintf("replaying since %s and task %q gone; re-queued as %q", e.UpdatedAt.Format(time.RFC3339), name, next))
		if !applied(f.Repair, e.ID, err) {
			return nil
		}
		if _, _, err := r.h.tasks.Schedule(ctx, tasks.Request{EntryID: cur.ID, Attempt: attempt, At: now}); err != nil {
			// The entry is scheduled under the new name; the next run's
			// missing-task check creates the task.
			f.Repair.Fail(fmt.Errorf("entry %s re-queued, task not created (next run creates it): %w", e.ID, err))
			return nil
		}
		f.Repair.Done++
		r.h.log.InfoContext(ctx, "reconcile: stuck entry re-queued", "run_id", r.rep.RunID, "entry_id", e.ID, "task", next)
		return nil
	})
}

// replayed marks replayed entries recovered when their task's completion
// record exists. It reads only the entries whose check is due
// (next_retry_at, which a replayed entry no longer needs for its replay):
// one whose task has not completed is looked at again after recheckAfter,
// not on every run, so an entry whose agent never records a completion
// costs a few reads a day instead of one a run for as long as it is kept.
// One whose replay died again is not due (its check went to the new entry,
// whose recovery recovers it: store.ChainCheckMargin), nor, after its first
// check, one without an idempotency key (its check is put off for good).
func (r *run) replayed(ctx context.Context, sec *audit.Section) error {
	var f *audit.Finding
	due := r.now()
	return r.eachPage(ctx, store.Query{Status: store.Replayed, DueBy: due}, &r.state.Replayed, func(page []*store.Entry) error {
		done, err := r.h.store.Completions(ctx, page)
		if err != nil {
			return err
		}
		for _, e := range page {
			sec.Add("replayed", 1)
			c := done[e.ID]
			if !c.Done {
				next := due.Add(recheckAfter(due.Sub(e.UpdatedAt)))
				if e.IdempotencyKey == "" {
					sec.Add("without_idempotency_key", 1)
					// Nothing can ever show its task completed, so no
					// later look can learn anything: put off past the
					// time Firestore's TTL deletes it.
					if never := e.ExpireAt.Add(afterExpiry); never.After(next) {
						next = never
					}
				}
				if !r.dry {
					// Not counted as a repair: nothing is wrong yet.
					deferred, err := r.h.store.DeferCheck(ctx, e, next)
					if err != nil {
						return err
					}
					if deferred {
						sec.Add("rechecks_deferred", 1)
					}
				}
				continue
			}
			if c.Legacy {
				// Counted until the migration window can end: while
				// it is not zero, an older kit's record still decides.
				sec.Add("legacy_completions", 1)
			}
			f = r.repairing(f, audit.FindingReplayedCompleted, SectionReplayed, "replayed entries whose task completed (task-idempotency record exists)", "mark_recovered")
			if !r.plan(f, e.ID) {
				continue
			}
			_, err := r.h.store.MarkRecoveredSeen(ctx, e, store.MoveRecover.Only(store.Replayed), By, c.Note(e), c)
			if applied(f.Repair, e.ID, err) {
				f.Repair.Done++
			}
		}
		return nil
	})
}

// afterExpiry puts a check off past an entry's life: Firestore's TTL
// deletes an expired document typically within a day of its expire_at.
const afterExpiry = 3 * 24 * time.Hour

// recheckAfter is how long a replayed entry whose task has not completed,
// replayed waited ago, waits for its next check: as long as it has waited
// already (so about log2 of its age in quarter hours checks in its first
// day), at least a quarter of an hour (the schedule's interval) and at most
// a third of the time agentkit keeps a completion record (a day), so a
// completion is seen well before its record expires.
func recheckAfter(waited time.Duration) time.Duration {
	return min(max(waited, 15*time.Minute), agentkit.DefaultIdempotencyTTL/3)
}

// eachPage pages through the entries q selects from *cursor, the
// section's saved place, and visits each page. The cursor moves past a page
// once it is visited, so a run cut short (by its budget or an error) resumes
// there; after the last page it starts over.
func (r *run) eachPage(ctx context.Context, q store.Query, cursor *store.Cursor, visit func(page []*store.Entry) error) error {
	for {
		if r.over() {
			return errBudget
		}
		page, next, err := r.scanStatus(ctx, q, *cursor)
		if err != nil {
			return err
		}
		if err := visit(page); err != nil {
			return err
		}
		*cursor = next
		if next.IsZero() {
			return nil
		}
	}
}

// eachEntry visits every entry in status st from *cursor as eachPage
// does, counting each under the section's counter named for the status;
// now is read once a page.
func (r *run) eachEntry(ctx context.Context, sec *audit.Section, st store.Status, cursor *store.Cursor, visit func(e *store.Entry, now time.Time) error) error {
	return r.eachPage(ctx, store.Query{Status: st}, cursor, func(page []*store.Entry) error {
		now := r.now()
		for _, e := range page {
			sec.Add(string(st), 1)
			if err := visit(e, now); err != nil {
				return err
			}
		}
		return nil
	})
}

// applied counts a conditional repair that did not go through and reports
// whether it did: an entry that moved on meanwhile (another run, a replay or
// an operator got there first) is skipped, not failed, because the next run
// sees it in its new state.
func applied(rp *audit.Repair, id string, err error) bool {
	switch {
	case errors.Is(err, store.ErrWrongStatus), errors.Is(err, store.ErrNotFound):
		rp.Skipped++
		rp.Note(fmt.Sprintf("%s changed meanwhile: %v", id, err))
		return false
	case errors.Is(err, store.ErrChainTooLong):
		// Recovered; the ancestors past the walk's bound wait for their
		// last check, which no retry would hasten.
		rp.Note(fmt.Sprintf("%s: %v", id, err))
		return true
	case err != nil:
		rp.Fail(err)
		return false
	}
	return true
}
