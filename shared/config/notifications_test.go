package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/config"
)

func TestReadNotificationsAfterCommit(t *testing.T) {
	tests := []struct {
		env           map[string]string
		budget, pause time.Duration
		bad           string // the variable the error names; "" is valid
	}{
		{env: map[string]string{}, budget: config.DefaultAfterCommitBudget, pause: config.DefaultPauseAfterFailure},
		{env: map[string]string{"NOTIFY_AFTER_COMMIT_BUDGET": "50ms", "NOTIFY_PAUSE_AFTER_FAILURE": "2m"}, budget: 50 * time.Millisecond, pause: 2 * time.Minute},
		{env: map[string]string{"NOTIFY_AFTER_COMMIT_BUDGET": "11s"}, bad: "NOTIFY_AFTER_COMMIT_BUDGET"},
		{env: map[string]string{"NOTIFY_AFTER_COMMIT_BUDGET": "0s"}, bad: "NOTIFY_AFTER_COMMIT_BUDGET"},
		{env: map[string]string{"NOTIFY_AFTER_COMMIT_BUDGET": "soon"}, bad: "NOTIFY_AFTER_COMMIT_BUDGET"},
		{env: map[string]string{"NOTIFY_PAUSE_AFTER_FAILURE": "2h"}, bad: "NOTIFY_PAUSE_AFTER_FAILURE"},
		{env: map[string]string{"NOTIFY_PAUSE_AFTER_FAILURE": "-1s"}, bad: "NOTIFY_PAUSE_AFTER_FAILURE"},
	}
	for _, tt := range tests {
		r := config.NewReader(config.MapLookup(tt.env))
		n := config.ReadNotifications(r)
		err := r.Err()
		switch {
		case tt.bad == "" && err != nil:
			t.Errorf("ReadNotifications(%v) error = %v, want nil", tt.env, err)
		case tt.bad == "" && (n.AfterCommitBudget != tt.budget || n.PauseAfterFailure != tt.pause):
			t.Errorf("ReadNotifications(%v) = budget %v pause %v, want %v, %v", tt.env, n.AfterCommitBudget, n.PauseAfterFailure, tt.budget, tt.pause)
		case tt.bad != "" && (!errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tt.bad)):
			t.Errorf("ReadNotifications(%v) error = %v, want ErrInvalid naming %s", tt.env, err, tt.bad)
		}
	}
}
