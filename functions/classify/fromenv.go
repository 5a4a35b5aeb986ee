package classify

import (
	"context"
	"fmt"
	"io"

	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/notify"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// FromEnv builds classify from its environment (lookup: os.LookupEnv in
// production), logging to logs: Firestore (the emulator when
// FIRESTORE_EMULATOR_HOST is set), the policy loader, the Cloud Tasks
// scheduler (the emulator when CLOUD_TASKS_EMULATOR_HOST is set) and the
// outbox's publisher (NOTIFICATIONS_TOPIC, and triage tasks to NATS_URL). Clients
// connect on first use. A configuration error is logged once, clearly, and
// returned: the caller returns it for every event, so Pub/Sub keeps
// redelivering (then dead-letters) instead of classify acknowledging events
// it cannot store.
func FromEnv(ctx context.Context, lookup config.Lookup, logs io.Writer) (*Handler, error) {
	log := obs.NewLogger(logs, obs.WithComponent("classify"))
	cfg, err := loadEnvironment(lookup)
	if err != nil {
		log.Error("classify: invalid configuration; events are refused until it is fixed", "error", err.Error())
		return nil, fmt.Errorf("classify: %w", err)
	}
	log = obs.NewLogger(logs, obs.WithComponent("classify"), obs.WithProject(cfg.Project))
	db, err := store.Open(ctx, cfg.Project)
	if err != nil {
		err = fmt.Errorf("classify: %w", err)
		log.Error("classify: cannot build clients", "error", err.Error())
		return nil, err
	}
	st := store.New(db)
	js := natsconn.NewLazy(cfg.NATS.Named("jsdlq-classify", log))
	return New(Config{}, Deps{
		Logger:    log,
		Store:     st,
		Policy:    st.PolicyLoader(log),
		Scheduler: tasks.New(cfg.Tasks),
		// The outbox right after a commit that staged a notification.
		Notify: notify.FromConfig(st, cfg.Project, cfg.PubSubEmulatorHost, cfg.Notifications, js.JetStream, log,
			notify.AfterCommitOptions(cfg.Notifications)...),
	}), nil
}

// environment is classify's configuration; loadEnvironment reads it on
// the shared config.Reader, every problem at once.
type environment struct {
	config.Common
	Tasks tasks.Config
	// Notifications: classify publishes the notifications its commits
	// stage right away (reconcile catches up on what it could not).
	Notifications config.Notifications
}

// loadEnvironment reads classify's configuration.
func loadEnvironment(lookup config.Lookup) (environment, error) {
	r := config.NewReader(lookup)
	common := config.ReadCommon(r)
	c := environment{Common: common, Tasks: config.ReadTasks(r, common), Notifications: config.ReadNotifications(r)}
	return c, r.Err()
}
