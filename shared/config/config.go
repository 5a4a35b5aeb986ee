// Package config is the one place jsdlq reads its environment
// (docs/configuration.md). Every variable goes through a Reader, which reports
// every missing or malformed variable at once, so a misconfigured deployment
// fails with the full list instead of one variable per redeploy.
//
// Settings land in the type of the package that uses them, once: the
// scheduling variables in a tasks.Config, NATS_URL and NATS_CREDS in a
// natsconn.Config, the auth variables in Auth (which shared/auth takes). A
// component's own settings are read by the component with the same Reader
// into its own Config (bridge.LoadEnv, functions/reconcile's FromEnv), since
// this package sits below every component and imports none of them.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/natsconn"
	"github.com/jsdlq/jsdlq/shared/tasks"
	"github.com/jsdlq/jsdlq/shared/webhook"
)

// ErrInvalid wraps every configuration error.
var ErrInvalid = errors.New("config: invalid environment")

// Lookup reads one variable; os.LookupEnv in production, a map in tests.
type Lookup func(string) (string, bool)

// MapLookup adapts a map to Lookup.
func MapLookup(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Reader reads variables and collects every problem; Err returns them joined.
type Reader struct {
	lookup Lookup
	errs   []error
}

// NewReader returns a Reader over lookup.
func NewReader(lookup Lookup) *Reader { return &Reader{lookup: lookup} }

func (r *Reader) get(name string) (string, bool) {
	v, ok := r.lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (r *Reader) fail(name, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
}

// Required returns the variable or records that it is missing.
func (r *Reader) Required(name string) string {
	v, ok := r.get(name)
	if !ok {
		r.fail(name, "required but not set")
	}
	return v
}

// String returns the variable or def when unset.
func (r *Reader) String(name, def string) string {
	if v, ok := r.get(name); ok {
		return v
	}
	return def
}

// Int returns the variable as an integer in [min, max], or def when unset.
func (r *Reader) Int(name string, def, min, max int) int {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		r.fail(name, "%q is not an integer in [%d, %d]", v, min, max)
		return def
	}
	return n
}

// Bool returns the variable as a boolean, or def when unset.
func (r *Reader) Bool(name string, def bool) bool {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, "%q is not a boolean", v)
		return def
	}
	return b
}

// Duration returns the variable as a positive Go duration, or def when unset.
func (r *Reader) Duration(name string, def time.Duration) time.Duration {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.fail(name, "%q is not a positive duration (for example 30s)", v)
		return def
	}
	return d
}

// Time returns the variable as an RFC 3339 time, or the zero time when
// unset.
func (r *Reader) Time(name string) time.Time {
	v, ok := r.get(name)
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		r.fail(name, "%q is not an RFC 3339 time (for example 2026-12-01T00:00:00Z)", v)
		return time.Time{}
	}
	return t
}

// HostPort returns a host:port variable (empty when unset and not required).
func (r *Reader) HostPort(name string, required bool) string {
	v, ok := r.get(name)
	if !ok {
		if required {
			r.fail(name, "required but not set")
		}
		return ""
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		r.fail(name, "%q is not host:port", v)
	}
	return v
}

// URL returns an absolute http(s) or nats URL variable.
func (r *Reader) URL(name string, required bool, schemes ...string) string {
	v, ok := r.get(name)
	if !ok {
		if required {
			r.fail(name, "required but not set")
		}
		return ""
	}
	for _, one := range strings.Split(v, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil || u.Host == "" || (len(schemes) > 0 && !contains(schemes, u.Scheme)) {
			r.fail(name, "%q is not an absolute %s URL", v, strings.Join(schemes, "/"))
			break
		}
	}
	return v
}

// List returns a comma-separated variable as trimmed, non-empty items.
func (r *Reader) List(name string) []string {
	v, ok := r.get(name)
	if !ok {
		return nil
	}
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// OneOf returns the variable when it is one of allowed, or def when unset.
func (r *Reader) OneOf(name, def string, allowed ...string) string {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	if !contains(allowed, v) {
		r.fail(name, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
	return v
}

// Check records a problem found by cross-variable validation.
func (r *Reader) Check(ok bool, name, format string, args ...any) {
	if !ok {
		r.fail(name, format, args...)
	}
}

// Err returns every problem found, joined, wrapped in ErrInvalid; nil when none.
func (r *Reader) Err() error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", ErrInvalid, errors.Join(r.errs...))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Common holds the variables every component reads.
type Common struct {
	Project                string
	FirestoreEmulatorHost  string
	PubSubEmulatorHost     string
	CloudTasksEmulatorHost string
	// NATS is where and as whom to connect (NATS_URL, NATS_CREDS); each
	// component names its connection and gives it a logger.
	NATS natsconn.Config
	// OnGoogleCloud is true when running as a Cloud Run service or function
	// (K_SERVICE set): local-only modes are refused there.
	OnGoogleCloud bool
	// LegacyCompletionsUntil (LEGACY_COMPLETIONS_UNTIL) ends the migration
	// window in which completion records written by agentkits from before
	// tenant scoping are honoured (store.WithLegacyCompletionsUntil); zero,
	// when unset: no end.
	LegacyCompletionsUntil time.Time
}

// DefaultNATSURL is NATS_URL when unset: the local stack's server.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// ReadCommon reads the variables every component reads.
func ReadCommon(r *Reader) Common {
	return Common{
		Project:                r.Required("GOOGLE_CLOUD_PROJECT"),
		FirestoreEmulatorHost:  r.HostPort("FIRESTORE_EMULATOR_HOST", false),
		PubSubEmulatorHost:     r.HostPort("PUBSUB_EMULATOR_HOST", false),
		CloudTasksEmulatorHost: r.HostPort("CLOUD_TASKS_EMULATOR_HOST", false),
		NATS: natsconn.Config{
			URL:   r.String("NATS_URL", DefaultNATSURL),
			Creds: r.String("NATS_CREDS", ""),
		},
		OnGoogleCloud:          r.String("K_SERVICE", "") != "",
		LegacyCompletionsUntil: r.Time(legacyCompletionsUntil),
	}
}

const legacyCompletionsUntil = "LEGACY_COMPLETIONS_UNTIL"

// LoadLegacyCompletionsUntil reads LEGACY_COMPLETIONS_UNTIL alone, for a
// caller that checks each setting when it needs it (dlqctl).
func LoadLegacyCompletionsUntil(lookup Lookup) (time.Time, error) {
	r := NewReader(lookup)
	t := r.Time(legacyCompletionsUntil)
	return t, r.Err()
}

// ReadCaptureStreams reads the names of the bridge's capture streams
// (ADVISORY_STREAM, RECORD_STREAM): the bridge writes them, reconcile audits
// them.
func ReadCaptureStreams(r *Reader) (advisory, record string) {
	return r.String("ADVISORY_STREAM", event.DefaultAdvisoryStream), r.String("RECORD_STREAM", event.DefaultRecordStream)
}

// Auth modes of the HTTP functions (docs/configuration.md, "replay and
// reconcile").
const (
	AuthOIDC     = "oidc"
	AuthEmulator = "emulator"
	AuthNone     = "none"
)

// Auth is how replay and reconcile authenticate their callers.
type Auth struct {
	Mode          string
	Audience      string
	AllowedEmails []string
}

// ReadAuth reads how an HTTP function authenticates its callers; the
// local-only modes are refused on Google Cloud.
func ReadAuth(r *Reader, common Common) Auth {
	a := Auth{
		Mode:          r.OneOf("AUTH_MODE", AuthOIDC, AuthOIDC, AuthEmulator, AuthNone),
		Audience:      r.String("AUTH_AUDIENCE", ""),
		AllowedEmails: r.List("AUTH_ALLOWED_EMAILS"),
	}
	CheckAuth(r, common, a, AuthVars{Mode: "AUTH_MODE", Audience: "AUTH_AUDIENCE", Allowed: "AUTH_ALLOWED_EMAILS"})
	return a
}

// AuthVars name the variables an Auth was read from, for the problems
// CheckAuth reports.
type AuthVars struct{ Mode, Audience, Allowed string }

// CheckAuth checks a's mode against where it runs and that the modes that
// verify tokens know what to expect (v names the variables that set them).
func CheckAuth(r *Reader, common Common, a Auth, v AuthVars) {
	r.Check(!(common.OnGoogleCloud && a.Mode != AuthOIDC), v.Mode,
		"%q is for local emulators only and is refused when K_SERVICE is set", a.Mode)
	if a.Mode != AuthNone {
		r.Check(a.Audience != "", v.Audience, "required when %s is %s", v.Mode, a.Mode)
		r.Check(len(a.AllowedEmails) > 0, v.Allowed, "required when %s is %s", v.Mode, a.Mode)
	}
	r.Check(a.Mode != AuthEmulator || common.CloudTasksEmulatorHost != "", "CLOUD_TASKS_EMULATOR_HOST",
		"required when %s is emulator (its JWKS verifies the tokens)", v.Mode)
}

// ReadTasks reads where replay tasks go (TASKS_QUEUE, REPLAY_URL,
// TASKS_SERVICE_ACCOUNT; all required) for every component that creates
// them, with the Cloud Tasks emulator of common when one is set.
func ReadTasks(r *Reader, common Common) tasks.Config {
	c := tasks.Config{
		Queue:          r.Required("TASKS_QUEUE"),
		ReplayURL:      r.URL("REPLAY_URL", true, "http", "https"),
		ServiceAccount: r.Required("TASKS_SERVICE_ACCOUNT"),
		EmulatorHost:   common.CloudTasksEmulatorHost,
	}
	checkQueue(r, "TASKS_QUEUE", c.Queue)
	return c
}

// checkQueue checks a queue's full name (when set).
func checkQueue(r *Reader, name, queue string) {
	if queue != "" {
		parts := strings.Split(queue, "/")
		r.Check(len(parts) == 6 && parts[0] == "projects" && parts[2] == "locations" && parts[4] == "queues" &&
			parts[1] != "" && parts[3] != "" && parts[5] != "",
			name, "%q is not projects/P/locations/L/queues/Q", queue)
	}
}

// HTTPFunction is the configuration replay and reconcile share: they
// authenticate their callers and read the scheduling variables too, so both
// have one deployment contract.
type HTTPFunction struct {
	Common
	Auth
	Tasks tasks.Config
}

// ReadHTTPFunction reads what every HTTP function reads; reconcile adds its
// own settings with the same Reader.
func ReadHTTPFunction(r *Reader) HTTPFunction {
	common := ReadCommon(r)
	return HTTPFunction{Common: common, Auth: ReadAuth(r, common), Tasks: ReadTasks(r, common)}
}

// Notifications is where the notifications outbox is published.
type Notifications struct {
	// Topic is the Pub/Sub topic (NOTIFICATIONS_TOPIC; default
	// dlq-notifications): a name in the project, or a full path.
	Topic string
	// ConsoleURL (CONSOLE_URL, optional) is the console's address; triage
	// tasks link to the entry's page under it.
	ConsoleURL string
	// Webhooks is where a flush fans tenant notifications out to
	// (WEBHOOKS_QUEUE unset: no fan-out by this component).
	Webhooks Webhooks
	// AfterCommitBudget (NOTIFY_AFTER_COMMIT_BUDGET, ≤ 10s) bounds the publish
	// after a commit in classify and replay; PauseAfterFailure
	// (NOTIFY_PAUSE_AFTER_FAILURE, ≤ 1h): how long they skip a failed destination.
	AfterCommitBudget, PauseAfterFailure time.Duration
	// ChangesTopic is the change feed's Pub/Sub topic (CHANGES_TOPIC;
	// default dlq-changes): a name in the project, or a full path.
	ChangesTopic string
}

// Defaults of Notifications' AfterCommitBudget and PauseAfterFailure.
const DefaultAfterCommitBudget, DefaultPauseAfterFailure = 250 * time.Millisecond, 30 * time.Second

// ReadNotifications reads where notifications go. The webhook settings
// need only the Cloud Tasks emulator of the common variables, which are
// read again here so every caller keeps its one-argument call.
func ReadNotifications(r *Reader) Notifications {
	common := Common{
		FirestoreEmulatorHost:  r.String("FIRESTORE_EMULATOR_HOST", ""),
		CloudTasksEmulatorHost: r.String("CLOUD_TASKS_EMULATOR_HOST", ""),
		OnGoogleCloud:          r.String("K_SERVICE", "") != "",
	}
	n := Notifications{
		Topic:             r.String("NOTIFICATIONS_TOPIC", event.DefaultNotificationsTopic),
		ConsoleURL:        r.URL("CONSOLE_URL", false, "https", "http"),
		Webhooks:          ReadWebhooks(r, common, false),
		AfterCommitBudget: r.Duration("NOTIFY_AFTER_COMMIT_BUDGET", DefaultAfterCommitBudget),
		PauseAfterFailure: r.Duration("NOTIFY_PAUSE_AFTER_FAILURE", DefaultPauseAfterFailure),
		// The feed's rows ride the notifications' outbox, so whatever
		// flushes one flushes the other.
		ChangesTopic: r.String("CHANGES_TOPIC", event.DefaultChangesTopic),
	}
	r.Check(n.AfterCommitBudget <= 10*time.Second, "NOTIFY_AFTER_COMMIT_BUDGET", "%s is more than 10s", n.AfterCommitBudget)
	r.Check(n.PauseAfterFailure <= time.Hour, "NOTIFY_PAUSE_AFTER_FAILURE", "%s is more than 1h", n.PauseAfterFailure)
	return n
}

// Webhooks is how tenant webhooks are delivered and which endpoints are
// refused. Delivery tasks go to Queue, each an HTTP call of the deliver
// function at DeliverURL (also the OIDC audience) as ServiceAccount; the
// deliverer disables an endpoint after DisableAfter consecutive failures
// and gives one delivery Timeout.
type Webhooks struct {
	// Queue is WEBHOOKS_QUEUE (projects/P/locations/L/queues/Q); empty:
	// this component creates no deliveries.
	Queue string
	// DeliverURL is WEBHOOK_DELIVER_URL, the deliver function's URL.
	DeliverURL string
	// ServiceAccount is WEBHOOK_SERVICE_ACCOUNT, the identity Cloud Tasks
	// mints the OIDC token for, the only caller deliver lets in.
	ServiceAccount string
	EmulatorHost   string // CLOUD_TASKS_EMULATOR_HOST
	// DisableAfter is WEBHOOK_DISABLE_AFTER (default 10).
	DisableAfter int
	// Timeout is WEBHOOK_TIMEOUT (default 10s).
	Timeout time.Duration
	// Local is WEBHOOK_LOCAL: http and loopback or private endpoints are
	// allowed. The local stack only: refused when K_SERVICE is set or
	// FIRESTORE_EMULATOR_HOST is not.
	Local bool
	// OwnURLs are jsdlq's own addresses, never an endpoint: REPLAY_URL,
	// WEBHOOK_DELIVER_URL, CONSOLE_URL and WEBHOOK_DENY_URLS (a list: the
	// other functions, the push endpoint, the tenant API).
	OwnURLs []string
}

// Guard is the webhook.Guard these settings call for: http and local
// addresses only when Local, never one of OwnURLs, with more (the store's
// own URLs source: webhook.WithOwnURLSource). Every component that checks
// or calls a tenant's endpoint builds its guard here, so registering
// (dlqctl, the console) and delivering cannot disagree on what is allowed.
func (w Webhooks) Guard(more ...webhook.GuardOption) *webhook.Guard {
	return webhook.NewGuard(append([]webhook.GuardOption{webhook.WithLocal(w.Local), webhook.WithOwnURLs(w.OwnURLs...)}, more...)...)
}

// Webhook defaults.
const (
	DefaultWebhookDisableAfter = 10
	DefaultWebhookTimeout      = 10 * time.Second
)

// ReadWebhooks reads the webhook settings; the queue, deliver URL and
// account are required when required or when WEBHOOKS_QUEUE is set.
func ReadWebhooks(r *Reader, common Common, required bool) Webhooks {
	w := Webhooks{
		Queue:        r.String("WEBHOOKS_QUEUE", ""),
		EmulatorHost: common.CloudTasksEmulatorHost,
		DisableAfter: r.Int("WEBHOOK_DISABLE_AFTER", DefaultWebhookDisableAfter, 1, 1000),
		Timeout:      r.Duration("WEBHOOK_TIMEOUT", DefaultWebhookTimeout),
		Local:        r.Bool("WEBHOOK_LOCAL", false),
	}
	checkQueue(r, "WEBHOOKS_QUEUE", w.Queue)
	if required || w.Queue != "" {
		w.Queue = r.Required("WEBHOOKS_QUEUE")
		w.DeliverURL = r.URL("WEBHOOK_DELIVER_URL", true, "http", "https")
		w.ServiceAccount = r.Required("WEBHOOK_SERVICE_ACCOUNT")
	} else {
		w.DeliverURL = r.String("WEBHOOK_DELIVER_URL", "")
	}
	r.Check(w.Timeout <= 5*time.Minute, "WEBHOOK_TIMEOUT", "%s is over 5m0s", w.Timeout)
	if w.Local && (common.OnGoogleCloud || common.FirestoreEmulatorHost == "") {
		r.fail("WEBHOOK_LOCAL", "is for the local stack only and is refused when K_SERVICE is set or FIRESTORE_EMULATOR_HOST is not")
		w.Local = false
	}
	for _, name := range []string{"REPLAY_URL", "WEBHOOK_DELIVER_URL", "CONSOLE_URL"} {
		if v := r.String(name, ""); v != "" {
			w.OwnURLs = append(w.OwnURLs, v)
		}
	}
	w.OwnURLs = append(w.OwnURLs, r.List("WEBHOOK_DENY_URLS")...)
	return w
}
