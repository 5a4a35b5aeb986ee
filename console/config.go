package console

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/tasks"
)

// Operator authentication modes (CONSOLE_AUTH).
const (
	// AuthIAP verifies the x-goog-iap-jwt-assertion header IAP signs.
	AuthIAP = "iap"
	// AuthLocal takes the operator from CONSOLE_OPERATOR: the local stack
	// only, refused when K_SERVICE is set or no emulator is configured.
	AuthLocal = "local"
)

// DefaultPort is the console's port in the local stack (docs/local-stack.md).
const DefaultPort = 8070

// Env is the console's configuration as read from its environment.
type Env struct {
	config.Common
	Tasks tasks.Config
	// Port is PORT (Cloud Run sets it), else CONSOLE_PORT, else 8070.
	Port int
	// Auth is CONSOLE_AUTH: iap (default) or local.
	Auth string
	// IAPAudience is CONSOLE_IAP_AUDIENCE, the aud IAP signs for this
	// service (/projects/NUMBER/locations/REGION/services/NAME).
	IAPAudience string
	// Operator is CONSOLE_OPERATOR, who acts in local mode, and Role
	// CONSOLE_ROLE, the role they act in (viewer, operator or approver;
	// default approver).
	Operator string
	Role     authority.Role
	// Principals are the principals of each console role behind IAP
	// (CONSOLE_VIEWERS, CONSOLE_OPERATORS, CONSOLE_APPROVERS: comma-separated
	// user:, serviceAccount:, group: and domain: principals).
	Principals map[authority.Role][]string
	// UI and API are what this instance serves (CONSOLE_SERVE, a list of
	// ui and api; default both): on Google Cloud the operator UI sits
	// behind IAP and the tenant API, which tenants reach with their keys,
	// is a second service of the same image.
	UI, API bool
	// Webhooks decides which endpoints the tenant API accepts
	// (WEBHOOK_LOCAL, jsdlq's own URLs).
	Webhooks config.Webhooks
	// RequestTimeout is CONSOLE_REQUEST_TIMEOUT, each request's deadline
	// (DefaultRequestTimeout): a page or API call still running then is
	// cut off with a 503.
	RequestTimeout time.Duration
	// Secrets seals the signing secrets of the endpoints tenants add
	// (required when the API is served).
	Secrets config.Secrets
	// URLs is CONSOLE_URLS, the URLs this instance is reached at (a list):
	// a request whose Host is none of them is refused. Required on Google
	// Cloud; elsewhere the default is the loopback addresses at Port
	// (Hosts).
	URLs []string
	// Triage is who may call the triage endpoint (docs/console.md, "The
	// triage endpoint"): the emails of the triage agents' identities
	// (CONSOLE_TRIAGE_AGENTS; none: the endpoint is not served), the
	// audience their ID tokens name (CONSOLE_TRIAGE_AUDIENCE, default the
	// first of CONSOLE_URLS) and how tokens are verified
	// (CONSOLE_TRIAGE_AUTH: oidc, Google's; emulator, the Cloud Tasks
	// emulator's keys, local only).
	Triage config.Auth
}

// Hosts are the URLs whose Host the console answers: URLs, else the
// loopback addresses at Port and, when listen (the --host flag) is another
// specific address, that address at Port.
func (e Env) Hosts(listen string) []string {
	if len(e.URLs) > 0 {
		return e.URLs
	}
	port := strconv.Itoa(e.Port)
	out := []string{"http://127.0.0.1:" + port, "http://localhost:" + port, "http://[::1]:" + port}
	if ip, err := netip.ParseAddr(listen); err == nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		out = append(out, "http://"+net.JoinHostPort(ip.String(), port))
	}
	return out
}

// ErrLocalNotLoopback refuses a local-mode console on an address other
// machines reach.
var ErrLocalNotLoopback = errors.New("console: local mode listens on loopback only")

// ListenHost is the address the console listens on for the --host flag.
// In local mode every request acts as the configured operator, so the
// console listens on loopback (127.0.0.1 when the flag is empty) and
// refuses any other address: on all interfaces anyone on the network would
// act as that operator, and the Host check stops browsers, not a client
// that sets its own Host. Behind IAP the flag's empty default is all
// interfaces, as Cloud Run needs.
func (e Env) ListenHost(flag string) (string, error) {
	if e.Auth != AuthLocal || !e.UI {
		return flag, nil
	}
	if flag == "" {
		return "127.0.0.1", nil
	}
	if flag == "localhost" {
		return flag, nil
	}
	if ip, err := netip.ParseAddr(flag); err == nil && ip.IsLoopback() {
		return flag, nil
	}
	return "", fmt.Errorf("%w: --host %q is not a loopback address (127.0.0.1, ::1 or localhost)", ErrLocalNotLoopback, flag)
}

// roleVars are the variables naming each console role's principals.
var roleVars = map[authority.Role]string{
	authority.Viewer: "CONSOLE_VIEWERS", authority.Operator: "CONSOLE_OPERATORS", authority.Approver: "CONSOLE_APPROVERS",
}

// DefaultRequestTimeout is a console request's deadline: under Cloud
// Run's 60 s request timeout (terraform/modules/console), so the console's
// own answer reaches the client first.
const DefaultRequestTimeout = 55 * time.Second

// LoadEnv reads the console's configuration (docs/console.md,
// "Configuration"): the common variables, the scheduling variables every
// replay path needs, and its own.
func LoadEnv(lookup config.Lookup) (Env, error) {
	r := config.NewReader(lookup)
	common := config.ReadCommon(r)
	e := Env{Common: common, Tasks: config.ReadTasks(r, common), Webhooks: config.ReadWebhooks(r, common, false)}
	e.Port = r.Int("PORT", r.Int("CONSOLE_PORT", DefaultPort, 1, 65535), 1, 65535)
	e.Auth = r.OneOf("CONSOLE_AUTH", AuthIAP, AuthIAP, AuthLocal)
	e.IAPAudience = r.String("CONSOLE_IAP_AUDIENCE", "")
	e.Operator = r.String("CONSOLE_OPERATOR", "")
	e.RequestTimeout = r.Duration("CONSOLE_REQUEST_TIMEOUT", DefaultRequestTimeout)
	r.Check(e.RequestTimeout >= time.Second && e.RequestTimeout <= time.Hour, "CONSOLE_REQUEST_TIMEOUT", "%s is not between 1s and 1h", e.RequestTimeout)
	e.Role = authority.Role(r.OneOf("CONSOLE_ROLE", string(authority.Approver), string(authority.Viewer), string(authority.Operator), string(authority.Approver)))
	e.Principals = map[authority.Role][]string{}
	for _, role := range []authority.Role{authority.Viewer, authority.Operator, authority.Approver} {
		name := roleVars[role]
		for _, p := range r.List(name) {
			_, err := ParsePrincipal(p)
			r.Check(err == nil, name, "%v", err)
			e.Principals[role] = append(e.Principals[role], p)
		}
	}
	e.URLs = r.List("CONSOLE_URLS")
	for _, u := range e.URLs {
		_, err := parseOwnURL(u)
		r.Check(err == nil, "CONSOLE_URLS", "%v", err)
	}
	r.Check(len(e.URLs) > 0 || !common.OnGoogleCloud, "CONSOLE_URLS", "required when K_SERVICE is set: the URLs the console is reached at (any other Host is refused)")
	serve := r.List("CONSOLE_SERVE")
	if len(serve) == 0 {
		serve = []string{"ui", "api"}
	}
	for _, s := range serve {
		switch s {
		case "ui":
			e.UI = true
		case "api":
			e.API = true
		default:
			r.Check(false, "CONSOLE_SERVE", "%q is neither ui nor api", s)
		}
	}
	e.Secrets = config.ReadSecrets(r, common, e.API)
	if agents := r.List("CONSOLE_TRIAGE_AGENTS"); len(agents) > 0 {
		audience := ""
		if len(e.URLs) > 0 {
			audience = e.URLs[0]
		}
		e.Triage = config.Auth{Mode: r.OneOf("CONSOLE_TRIAGE_AUTH", config.AuthOIDC, config.AuthOIDC, config.AuthEmulator),
			Audience: r.String("CONSOLE_TRIAGE_AUDIENCE", audience), AllowedEmails: agents}
		config.CheckAuth(r, common, e.Triage, config.AuthVars{Mode: "CONSOLE_TRIAGE_AUTH", Audience: "CONSOLE_TRIAGE_AUDIENCE", Allowed: "CONSOLE_TRIAGE_AGENTS"})
		for _, a := range agents {
			at := strings.IndexByte(a, '@')
			r.Check(at > 0 && at < len(a)-1 && strings.Count(a, "@") == 1, "CONSOLE_TRIAGE_AGENTS", "%q is not an email", a)
		}
		r.Check(e.API, "CONSOLE_TRIAGE_AGENTS", "the triage endpoint is part of the API: CONSOLE_SERVE must include api")
	}
	if e.UI {
		switch e.Auth {
		case AuthIAP:
			r.Check(e.IAPAudience != "", "CONSOLE_IAP_AUDIENCE", "required when CONSOLE_AUTH is iap")
			r.Check(len(e.Principals) > 0, "CONSOLE_APPROVERS", "CONSOLE_VIEWERS, CONSOLE_OPERATORS or CONSOLE_APPROVERS must name someone when CONSOLE_AUTH is iap: without them nobody has a role")
		case AuthLocal:
			r.Check(!common.OnGoogleCloud, "CONSOLE_AUTH", "local is for the emulators only and is refused when K_SERVICE is set")
			r.Check(common.FirestoreEmulatorHost != "", "CONSOLE_AUTH", "local needs FIRESTORE_EMULATOR_HOST: it exists only with the emulators")
			r.Check(e.Operator != "", "CONSOLE_OPERATOR", "required when CONSOLE_AUTH is local (who acts in entry history)")
		}
	}
	return e, r.Err()
}
