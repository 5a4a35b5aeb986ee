package reconciler

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jsdlq/jsdlq/shared/audit"
)

// SectionNotifications publishes the notifications outbox.
const SectionNotifications = "notifications"

// notifications publishes what the outbox holds, this run's own transitions
// included (it runs last): every notification is written with its
// transition, and this section makes sure it leaves, whichever function
// made it. What fails stays in the outbox for the next run and is a finding.
func (r *run) notifications(ctx context.Context, sec *audit.Section) error {
	if r.h.notify == nil {
		return errSkipped
	}
	if r.dry {
		sec.Note = "dry run: nothing published"
		return nil
	}
	res, err := r.h.notify.Flush(ctx)
	sec.Add("published", int64(res.Published))
	sec.Add("triage_tasks", int64(res.Triaged))
	sec.Add("failed", int64(res.Failed))
	if res.Failed > 0 {
		f := r.finding(audit.AlertNotificationsUnpublished, SectionNotifications, "",
			fmt.Sprintf("%d notifications not published; they stay in the outbox for the next run", res.Failed))
		f.Count = res.Failed
		for _, e := range res.Errors {
			f.Example(e)
		}
	}
	return err
}

// flushAlerts publishes, after the report is saved, the alert_raised and
// alert_cleared notifications its save staged (store.SaveAudit), so they
// leave with this run rather than the next. Best effort: what fails stays
// in the outbox for the next run's notifications section.
func (r *run) flushAlerts(ctx context.Context, log *slog.Logger) {
	if r.h.notify == nil || r.dry {
		return
	}
	fctx, cancel := r.h.ioCtx(ctx)
	defer cancel()
	res, err := r.h.notify.Flush(fctx)
	if err != nil || res.Failed > 0 {
		log.WarnContext(ctx, "reconcile: notifications after the report not all published; the next run retries them",
			"published", res.Published, "failed", res.Failed, "error", fmt.Sprint(err))
	}
}
