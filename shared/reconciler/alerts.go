package reconciler

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jsdlq/jsdlq/shared/audit"
)

// finish sorts and totals the report and logs one ERROR entry per alerting
// finding (Terraform's log-based metrics read jsonPayload.alert).
func finish(ctx context.Context, log *slog.Logger, r *audit.Report) {
	r.Finish()
	for _, f := range r.Findings {
		if !f.Alert {
			continue
		}
		args := []any{"alert", f.Name, "alert_severity", f.Severity, "run_id", r.RunID, "dry_run", r.DryRun,
			"section", f.Section, "count", f.Count, "examples", f.Examples}
		if f.Tenant != "" {
			args = append(args, "tenant", f.Tenant)
		}
		if f.Agent != "" {
			args = append(args, "agent", f.Agent)
		}
		if f.Threshold != 0 {
			args = append(args, "value", f.Value, "threshold", f.Threshold)
		}
		if f.Repair != nil {
			args = append(args, "repair_action", f.Repair.Action, "repairs_done", f.Repair.Done, "repairs_failed", f.Repair.Failed)
		}
		log.ErrorContext(ctx, fmt.Sprintf("reconcile alert %s: %s", f.Name, f.Message), args...)
	}
}
