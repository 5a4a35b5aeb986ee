package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file gives operators their role (docs/console.md, "Operator roles").
// IAP vouches for an identity (the account's email, and for a Google
// Workspace or Cloud Identity account its domain); the console maps it to
// viewer, operator or approver by the principals configured for each role
// (CONSOLE_VIEWERS, CONSOLE_OPERATORS, CONSOLE_APPROVERS, from Terraform's
// console_viewers, console_operators, console_approvers). What each role may
// do is the authority rule's (shared/authority); the console enforces it in
// one place for its forms (Server.form) and shared/operator for every
// action.

// ErrNoRole: the identity is authenticated but matches no configured
// principal (403).
var ErrNoRole = errors.New("console: no console role")

// Identity is who IAP vouches for.
type Identity struct {
	// Email is the account's email.
	Email string
	// Domain is the account's Google Workspace or Cloud Identity domain
	// (IAP's hd claim); "" for a consumer account.
	Domain string
}

// Principal kinds, as IAM spells them.
const (
	PrincipalUser           = "user"
	PrincipalServiceAccount = "serviceAccount"
	PrincipalGroup          = "group"
	PrincipalDomain         = "domain"
)

// Principal is one configured principal: user:EMAIL, serviceAccount:EMAIL,
// group:EMAIL or domain:DOMAIN.
type Principal struct {
	Kind  string
	Value string
}

func (p Principal) String() string { return p.Kind + ":" + p.Value }

// ParsePrincipal reads a principal as IAM writes it. allUsers and
// allAuthenticatedUsers are refused: a role is for named identities.
func ParsePrincipal(s string) (Principal, error) {
	kind, v, ok := strings.Cut(strings.TrimSpace(s), ":")
	p := Principal{Kind: kind, Value: strings.ToLower(v)}
	bad := func(why string) (Principal, error) {
		return Principal{}, fmt.Errorf("principal %q: %s", s, why)
	}
	switch {
	case !ok:
		return bad("want user:, serviceAccount:, group: or domain: and a name (allUsers and allAuthenticatedUsers are refused)")
	case v == "" || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '"' || r == '\\' || r == ',' }):
		return bad("the name is empty or holds spaces, control characters, double quotes, backslashes or commas")
	}
	switch kind {
	case PrincipalUser, PrincipalServiceAccount, PrincipalGroup:
		if at := strings.IndexByte(v, '@'); at <= 0 || at == len(v)-1 || strings.Count(v, "@") != 1 {
			return bad("want an email after " + kind + ":")
		}
	case PrincipalDomain:
		if strings.Contains(v, "@") || !strings.Contains(v, ".") {
			return bad("want a domain name after domain: (example.com)")
		}
	default:
		return bad("unknown kind " + kind + ": want user, serviceAccount, group or domain")
	}
	return p, nil
}

// GroupChecker answers whether member belongs to group, directly or
// through nested groups (*CloudIdentityGroups).
type GroupChecker interface {
	IsMember(ctx context.Context, group, member string) (bool, error)
}

// Roles maps identities to console roles.
type Roles struct {
	// byRole holds the principals of approver, operator and viewer, in
	// that order: the highest role whose principals match wins.
	byRole []rolePrincipals
	groups GroupChecker
	log    *slog.Logger
}

type rolePrincipals struct {
	role       authority.Role
	principals []Principal
}

// RoleOptions configure NewRoles.
type RoleOptions struct {
	// Groups resolves group: principals; required when one is configured.
	Groups GroupChecker
	// Log receives the group checks that failed (nil: discarded).
	Log *slog.Logger
}

// NewRoles returns the mapping of the principals of each console role
// (viewer, operator, approver; another role is an error).
func NewRoles(principals map[authority.Role][]string, o RoleOptions) (*Roles, error) {
	r := &Roles{groups: o.Groups, log: o.Log}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	for role := range principals {
		if role != authority.Viewer && role != authority.Operator && role != authority.Approver {
			errs = append(errs, fmt.Errorf("console: %q is not a console role (viewer, operator, approver)", role))
		}
	}
	needGroups := false
	for _, role := range []authority.Role{authority.Approver, authority.Operator, authority.Viewer} {
		rp := rolePrincipals{role: role}
		for _, s := range principals[role] {
			p, err := ParsePrincipal(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("console: %s: %w", role, err))
				continue
			}
			needGroups = needGroups || p.Kind == PrincipalGroup
			rp.principals = append(rp.principals, p)
		}
		r.byRole = append(r.byRole, rp)
	}
	if needGroups && r.groups == nil {
		errs = append(errs, errors.New("console: group principals need a group checker"))
	}
	return r, errors.Join(errs...)
}

// RoleOf is the highest role whose principals match id: a user or service
// account by email, a domain by the account's domain, a group by (possibly
// nested) membership. A group whose membership cannot be checked grants
// nothing (logged): a role is never guessed. ErrNoRole when none matches.
func (r *Roles) RoleOf(ctx context.Context, id Identity) (authority.Role, error) {
	email, domain := strings.ToLower(id.Email), strings.ToLower(id.Domain)
	for _, rp := range r.byRole {
		var groups []Principal
		for _, p := range rp.principals {
			switch p.Kind {
			case PrincipalUser, PrincipalServiceAccount:
				if p.Value == email {
					return rp.role, nil
				}
			case PrincipalDomain:
				if domain != "" && p.Value == domain {
					return rp.role, nil
				}
			case PrincipalGroup:
				groups = append(groups, p) // after the cheap checks
			}
		}
		for _, g := range groups {
			ok, err := r.groups.IsMember(ctx, g.Value, email)
			if err != nil {
				r.log.WarnContext(ctx, "console role: group membership unknown; the group grants nothing", "group", g.Value, "role", string(rp.role), "error", err.Error())
				continue
			}
			if ok {
				return rp.role, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s matches no principal of console_viewers, console_operators or console_approvers", ErrNoRole, id.Email)
}

// IdentityAuth verifies who a request comes from (IAPAuth).
type IdentityAuth interface {
	Identity(r *http.Request) (Identity, error)
}

// RoleAuth is the console's authenticator behind IAP: the verified
// identity, in the role its principals give it.
type RoleAuth struct {
	ids   IdentityAuth
	roles *Roles
}

// NewRoleAuth returns an authenticator of ids mapped by roles.
func NewRoleAuth(ids IdentityAuth, roles *Roles) *RoleAuth { return &RoleAuth{ids: ids, roles: roles} }

// Operator is the verified identity in its role.
func (a *RoleAuth) Operator(r *http.Request) (authority.Actor, error) {
	id, err := a.ids.Identity(r)
	if err != nil {
		return authority.Actor{}, err
	}
	role, err := a.roles.RoleOf(r.Context(), id)
	if err != nil {
		return authority.Actor{Name: id.Email}, err
	}
	return authority.Actor{Name: id.Email, Role: role}, nil
}

// offerForms sets the entry page's forms: those the entry's status offers
// and the operator's role may use (the authority rule, asked for each), and
// why the others are not the operator's.
func (s *Server) offerForms(r *http.Request, e *store.Entry, d *entryData) error {
	offer := func(offered bool, act authority.Action) (bool, error) {
		if !offered {
			return false, nil
		}
		err := s.actions.May(r.Context(), actorOf(r), act, e)
		var denied *authority.Denied
		if errors.As(err, &denied) {
			if !slices.Contains(d.NotMine, denied.Reason()) {
				d.NotMine = append(d.NotMine, denied.Reason())
			}
			return false, nil
		}
		return err == nil, err
	}
	var errs [4]error
	d.Approvable, errs[0] = offer(has(operator.Approvable, e.Status), authority.Approve)
	d.Runnable, errs[1] = offer(has(operator.Runnable, e.Status), authority.ReplayNow)
	d.Discard, errs[2] = offer(has(operator.Discardable, e.Status), authority.Discard)
	d.Probe, errs[3] = offer(e.Status == store.Held || e.Status == store.Scheduled, authority.Breaker)
	return errors.Join(errs[:]...)
}

// actorKey carries the request's actor in its context.
type actorKey struct{}

func withActor(r *http.Request, who authority.Actor) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), actorKey{}, who))
}

// actorOf is the actor page and form put in the request (none: no role).
func actorOf(r *http.Request) authority.Actor {
	who, _ := r.Context().Value(actorKey{}).(authority.Actor)
	return who
}
