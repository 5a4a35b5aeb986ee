package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/redrive"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the bulk runner: the loop in each console UI instance that
// claims a confirmed run under a lease and works on it to its end, and
// what happens when it stops, is cancelled or loses its lease.

// RunBulk works on bulk runs until ctx ends: at once and then every poll
// interval it claims a run no instance holds (a new one, or one whose
// instance stopped and whose lease expired) and works on it to its end.
// It returns when ctx ends, releasing the lease of the run in hand so
// another instance continues at once.
func (s *Server) RunBulk(ctx context.Context) {
	for {
		run, err := s.store.ClaimBulkRun(ctx, s.bulk.instance, s.bulk.lease)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.ErrorContext(ctx, "claim bulk run", "error", err.Error())
		case run != nil:
			if s.workBulk(ctx, run) {
				continue // look for the next at once
			}
		}
		t := time.NewTimer(s.bulk.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// workBulk runs a claimed run until it ends, is cancelled, loses its lease
// or ctx ends. It reports whether the runner may claim the next run at
// once (false after an error: it waits a poll interval first).
func (s *Server) workBulk(ctx context.Context, run *store.BulkRun) bool {
	log := s.log.With("run", run.ID, "instance", s.bulk.instance)
	owner := s.bulk.instance
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	// A run confirmed before roles existed acts as an operator: the least
	// role that could confirm it now.
	by := authority.Actor{Name: run.Actor, Role: cmp.Or(run.Role, authority.Operator)}
	rd := &redrive.Run{Store: s.store, Actions: s.actions, Query: run.Filter.Query(), Include: run.Include, Scope: store.AllTenants,
		By: by, Rate: run.Rate, Progress: &run.Progress,
		Failed: func(id string, err error) {
			if errors.Is(err, operator.ErrTaskNotCreated) {
				log.WarnContext(ctx, "bulk redrive action recorded, its replay task left to reconcile", "entry", id, "error", err.Error())
				return
			}
			log.WarnContext(ctx, "bulk redrive action failed", "entry", id, "error", err.Error())
		},
	}
	// Save is the write-ahead and the cancel check in one transaction: a
	// run cancelled meanwhile is marked cancelled with the progress so far
	// and without the entry in hand, which is then not acted on.
	rd.Save = func(ctx context.Context) error {
		stopped := false
		_, err := s.store.UpdateBulkRun(ctx, run.ID, owner, func(cur *store.BulkRun) error {
			cur.Progress = *rd.Progress
			if cur.State == store.BulkCancelling {
				stopped = true
				cur.Progress.Pending = nil
				cur.State, cur.FinishedAt, cur.LeaseOwner, cur.LeaseUntil = store.BulkCancelled, s.store.Now(), "", time.Time{}
				return nil
			}
			cur.LeaseUntil = s.store.Now().Add(s.bulk.lease)
			return nil
		})
		if err != nil {
			return err
		}
		if stopped {
			return redrive.ErrStopped
		}
		return nil
	}
	if run.State == store.BulkCancelling {
		// Cancelled while no instance worked on it: decide the entry in
		// hand without acting, and end it.
		if err := rd.SettleUnacted(ctx); err != nil {
			log.ErrorContext(ctx, "settle a cancelled bulk run", "error", err.Error())
			s.releaseBulk(run.ID, owner, log)
			return false
		}
		if err := rd.Save(ctx); err != nil && !errors.Is(err, redrive.ErrStopped) {
			log.ErrorContext(ctx, "end a cancelled bulk run", "error", err.Error())
			return false
		}
		return true
	}
	// The lease is renewed while the run waits between actions (a slow
	// rate) or passes entries it leaves alone; a cancel seen here stops
	// the wait at once.
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		t := time.NewTicker(s.bulk.lease / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			var cancelling bool
			_, err := s.store.UpdateBulkRun(rctx, run.ID, owner, func(cur *store.BulkRun) error {
				cancelling = cur.State == store.BulkCancelling
				cur.LeaseUntil = s.store.Now().Add(s.bulk.lease)
				return nil
			})
			if errors.Is(err, store.ErrLeaseLost) || cancelling {
				stop()
				return
			}
		}
	}()
	log.InfoContext(ctx, "bulk redrive working", "seen", run.Progress.Seen, "total", run.Total)
	err := rd.Do(rctx)
	stop()
	<-beat // no renewal after this point, whatever ends the run
	switch {
	case err == nil:
		_, err = s.store.UpdateBulkRun(context.WithoutCancel(ctx), run.ID, owner, func(cur *store.BulkRun) error {
			cur.Progress = *rd.Progress
			cur.State, cur.FinishedAt, cur.LeaseOwner, cur.LeaseUntil = store.BulkDone, s.store.Now(), "", time.Time{}
			return nil
		})
		if err != nil {
			log.ErrorContext(ctx, "finish bulk run", "error", err.Error())
			return false
		}
		log.InfoContext(ctx, "bulk redrive done", "summary", redrive.Summary(rd.Progress))
		return true
	case errors.Is(err, redrive.ErrStopped):
		if ctx.Err() != nil || !s.cancelled(run.ID) {
			s.releaseBulk(run.ID, owner, log)
		}
		log.InfoContext(ctx, "bulk redrive stopped", "seen", rd.Progress.Seen, "summary", redrive.Summary(rd.Progress))
		return true
	case errors.Is(err, store.ErrLeaseLost):
		log.WarnContext(ctx, "bulk run taken over by another instance; stopped here", "error", err.Error())
		return true
	case errors.Is(err, store.ErrBadQuery):
		// The filter cannot be queried: running it again cannot help.
		_, uerr := s.store.UpdateBulkRun(context.WithoutCancel(ctx), run.ID, owner, func(cur *store.BulkRun) error {
			cur.State, cur.Error, cur.FinishedAt, cur.LeaseOwner, cur.LeaseUntil = store.BulkFailed, err.Error(), s.store.Now(), "", time.Time{}
			return nil
		})
		log.ErrorContext(ctx, "bulk run failed", "error", err.Error(), "update_error", fmt.Sprint(uerr))
		return true
	default:
		// Firestore or Cloud Tasks trouble: the progress up to the last
		// save stands; the next claim continues from it.
		log.ErrorContext(ctx, "bulk run interrupted; it is resumed on the next claim", "error", err.Error())
		s.releaseBulk(run.ID, owner, log)
		return false
	}
}

// cancelled reports whether the run has been marked cancelled.
func (s *Server) cancelled(id string) bool {
	r, err := s.store.GetBulkRun(context.Background(), id)
	return err == nil && r.State == store.BulkCancelled
}

// releaseBulk gives up the lease of a run still going on, so another
// instance (or this one's next claim) continues it without waiting for the
// lease to expire.
func (s *Server) releaseBulk(id, owner string, log *slog.Logger) {
	_, err := s.store.UpdateBulkRun(context.Background(), id, owner, func(cur *store.BulkRun) error {
		cur.LeaseOwner, cur.LeaseUntil = "", time.Time{}
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrLeaseLost) {
		log.Error("release bulk run lease", "run", id, "error", err.Error())
	}
}
