// Package config is the one place jsdlq reads its environment (SPEC §14). Each
// component has a Load function that reports every missing or malformed
// variable at once, so a misconfigured deployment fails with the full list
// instead of one variable per redeploy.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
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
	NATSURL                string
	NATSCreds              string // path to a credentials file; optional
	// OnGoogleCloud is true when running as a Cloud Run service or function
	// (K_SERVICE set): local-only modes are refused there.
	OnGoogleCloud bool
}

func readCommon(r *Reader) Common {
	return Common{
		Project:                r.Required("GOOGLE_CLOUD_PROJECT"),
		FirestoreEmulatorHost:  r.HostPort("FIRESTORE_EMULATOR_HOST", false),
		PubSubEmulatorHost:     r.HostPort("PUBSUB_EMULATOR_HOST", false),
		CloudTasksEmulatorHost: r.HostPort("CLOUD_TASKS_EMULATOR_HOST", false),
		NATSURL:                r.String("NATS_URL", "nats://127.0.0.1:4222"),
		NATSCreds:              r.String("NATS_CREDS", ""),
		OnGoogleCloud:          r.String("K_SERVICE", "") != "",
	}
}

// Bridge is the bridge's configuration (cmd/bridge).
type Bridge struct {
	Common
	Topic           string
	AdvisoryStream  string
	RecordStream    string
	FailureBucket   string
	Consumer        string
	Port            int
	DeleteForwarded bool
	MaxInFlight     int
	// AckWait is the bridge consumers' ack wait (BRIDGE_ACK_WAIT): how long
	// messages a crashed instance held wait for redelivery. Zero when unset:
	// the bridge's default (45 s) applies.
	AckWait time.Duration
	// EnsureTopic lets the bridge create its topic when missing
	// (BRIDGE_ENSURE_TOPIC); default on with PUBSUB_EMULATOR_HOST, whose
	// topics vanish in a restart, and off otherwise: Terraform owns the
	// production topic.
	EnsureTopic bool
}

// LoadBridge reads the bridge's configuration.
func LoadBridge(lookup Lookup) (Bridge, error) {
	r := NewReader(lookup)
	c := Bridge{
		Common:          readCommon(r),
		Topic:           r.String("DLQ_TOPIC", "dlq-events"),
		AdvisoryStream:  r.String("ADVISORY_STREAM", "DLQ_ADVISORIES"),
		RecordStream:    r.String("RECORD_STREAM", "DLQ_RECORDS"),
		FailureBucket:   r.String("FAILURE_BUCKET", "dlq_failures"),
		Consumer:        r.String("BRIDGE_CONSUMER", "dlq-bridge"),
		Port:            r.Int("PORT", 8090, 1, 65535),
		DeleteForwarded: r.Bool("DELETE_FORWARDED", false),
		MaxInFlight:     r.Int("BRIDGE_MAX_IN_FLIGHT", 256, 1, 10000),
	}
	c.EnsureTopic = r.Bool("BRIDGE_ENSURE_TOPIC", c.PubSubEmulatorHost != "")
	c.AckWait = r.Duration("BRIDGE_ACK_WAIT", 0)
	r.Check(c.AckWait == 0 || c.AckWait >= 5*time.Second, "BRIDGE_ACK_WAIT", "%s is below the 5s minimum", c.AckWait)
	return c, r.Err()
}

// Auth modes of the HTTP functions (SPEC §14).
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

func readAuth(r *Reader, common Common) Auth {
	a := Auth{
		Mode:          r.OneOf("AUTH_MODE", AuthOIDC, AuthOIDC, AuthEmulator, AuthNone),
		Audience:      r.String("AUTH_AUDIENCE", ""),
		AllowedEmails: r.List("AUTH_ALLOWED_EMAILS"),
	}
	r.Check(!(common.OnGoogleCloud && a.Mode != AuthOIDC), "AUTH_MODE",
		"%q is for local emulators only and is refused when K_SERVICE is set", a.Mode)
	if a.Mode != AuthNone {
		r.Check(a.Audience != "", "AUTH_AUDIENCE", "required when AUTH_MODE is %s", a.Mode)
		r.Check(len(a.AllowedEmails) > 0, "AUTH_ALLOWED_EMAILS", "required when AUTH_MODE is %s", a.Mode)
	}
	r.Check(a.Mode != AuthEmulator || common.CloudTasksEmulatorHost != "", "CLOUD_TASKS_EMULATOR_HOST",
		"required when AUTH_MODE is emulator (its JWKS verifies the tokens)")
	return a
}

// Scheduling is what every component that creates replay tasks needs.
type Scheduling struct {
	TasksQueue          string // projects/P/locations/L/queues/Q
	ReplayURL           string
	TasksServiceAccount string
}

func readScheduling(r *Reader) Scheduling {
	s := Scheduling{
		TasksQueue:          r.Required("TASKS_QUEUE"),
		ReplayURL:           r.URL("REPLAY_URL", true, "http", "https"),
		TasksServiceAccount: r.Required("TASKS_SERVICE_ACCOUNT"),
	}
	if s.TasksQueue != "" {
		parts := strings.Split(s.TasksQueue, "/")
		r.Check(len(parts) == 6 && parts[0] == "projects" && parts[2] == "locations" && parts[4] == "queues" &&
			parts[1] != "" && parts[3] != "" && parts[5] != "",
			"TASKS_QUEUE", "%q is not projects/P/locations/L/queues/Q", s.TasksQueue)
	}
	return s
}

// Classify is the classify function's configuration.
type Classify struct {
	Common
	Scheduling
}

// LoadClassify reads the classify function's configuration.
func LoadClassify(lookup Lookup) (Classify, error) {
	r := NewReader(lookup)
	c := Classify{Common: readCommon(r), Scheduling: readScheduling(r)}
	return c, r.Err()
}

// Replay is the replay function's configuration. It schedules tasks too
// (approvals, re-queues), so it reads the scheduling variables.
type Replay struct {
	Common
	Auth
	Scheduling
}

// LoadReplay reads the replay function's configuration.
func LoadReplay(lookup Lookup) (Replay, error) {
	r := NewReader(lookup)
	common := readCommon(r)
	c := Replay{Common: common, Auth: readAuth(r, common), Scheduling: readScheduling(r)}
	return c, r.Err()
}

// Reconcile is the reconcile function's configuration.
type Reconcile struct {
	Common
	Auth
	Scheduling
	WorkStreams []string // streams whose sequences and ack floors are sampled
	TimeBudget  time.Duration
	// The bridge's capture streams, whose sequences the audit compares
	// with the entries (the same variables as the bridge's).
	AdvisoryStream string
	RecordStream   string
}

// LoadReconcile reads the reconcile function's configuration.
func LoadReconcile(lookup Lookup) (Reconcile, error) {
	r := NewReader(lookup)
	common := readCommon(r)
	c := Reconcile{
		Common:         common,
		Auth:           readAuth(r, common),
		Scheduling:     readScheduling(r),
		WorkStreams:    r.List("WORK_STREAMS"),
		TimeBudget:     r.Duration("RECONCILE_TIME_BUDGET", 4*time.Minute),
		AdvisoryStream: r.String("ADVISORY_STREAM", "DLQ_ADVISORIES"),
		RecordStream:   r.String("RECORD_STREAM", "DLQ_RECORDS"),
	}
	return c, r.Err()
}

// Functions is the local functions host's configuration (cmd/functions).
type Functions struct {
	Port int
}

// LoadFunctions reads the functions host's configuration.
func LoadFunctions(lookup Lookup) (Functions, error) {
	r := NewReader(lookup)
	return Functions{Port: r.Int("PORT", 8080, 1, 65535)}, r.Err()
}
