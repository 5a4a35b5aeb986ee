package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/api/cloudidentity/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
)

// This file resolves group: principals (docs/console.md, "Operator
// roles"). IAP's assertion names the account, never its groups, so the
// console asks the Cloud Identity Groups API whether the account belongs to
// the group, directly or through nested groups
// (groups.memberships.checkTransitiveMembership), as its own service
// account. That needs the Cloud Identity API enabled, the service account
// allowed to see the group's members (the Groups Reader admin role), and a
// Google Workspace Enterprise or Cloud Identity Premium account; without
// them the API refuses, the group grants nothing and the refusal is logged.
// Answers are cached, so a page view costs no API call once its operator
// has been looked up.

// Group cache defaults (WithGroupTTL).
const (
	// DefaultGroupTTL is how long a membership answer is used: a member
	// removed from a group keeps its role at most this long.
	DefaultGroupTTL = 5 * time.Minute
	// groupErrorTTL is how long a failed check is remembered, so an API
	// that refuses (an edition without the method, a missing grant) is
	// not asked on every request.
	groupErrorTTL = time.Minute
	// maxGroupAnswers bounds the cache; full, it starts over.
	maxGroupAnswers = 10000
)

// CloudIdentityGroups checks group membership with the Cloud Identity
// Groups API through a client built on first use.
type CloudIdentityGroups struct {
	opts []option.ClientOption
	ttl  time.Duration
	now  func() time.Time

	once   sync.Once
	svc    *cloudidentity.Service
	svcErr error

	mu      sync.Mutex
	names   map[string]groupAnswer // group email -> groups/ID
	members map[[2]string]groupAnswer
}

type groupAnswer struct {
	name   string
	member bool
	err    error
	until  time.Time
}

// NewCloudIdentityGroups returns a checker whose client is built with opts
// (none: Application Default Credentials, the console's service account)
// on its first check; ttl <= 0 is DefaultGroupTTL.
func NewCloudIdentityGroups(ttl time.Duration, opts ...option.ClientOption) *CloudIdentityGroups {
	if ttl <= 0 {
		ttl = DefaultGroupTTL
	}
	return &CloudIdentityGroups{opts: opts, ttl: ttl, now: time.Now, names: map[string]groupAnswer{}, members: map[[2]string]groupAnswer{}}
}

func (g *CloudIdentityGroups) service(ctx context.Context) (*cloudidentity.Service, error) {
	g.once.Do(func() {
		opts := append([]option.ClientOption{option.WithScopes(cloudidentity.CloudIdentityGroupsReadonlyScope)}, g.opts...)
		// The client outlives the request that built it.
		g.svc, g.svcErr = cloudidentity.NewService(context.WithoutCancel(ctx), opts...)
		if g.svcErr != nil {
			g.svcErr = fmt.Errorf("console: cloud identity client: %w", g.svcErr)
		}
	})
	return g.svc, g.svcErr
}

// IsMember reports whether member belongs to group, directly or through
// nested groups. A group that does not exist has no members.
func (g *CloudIdentityGroups) IsMember(ctx context.Context, group, member string) (bool, error) {
	key := [2]string{strings.ToLower(group), strings.ToLower(member)}
	if a, ok := cachedIn(g, g.members, key); ok {
		return a.member, a.err
	}
	name, err := g.groupName(ctx, key[0])
	var in bool
	switch {
	case err != nil:
	case name == "":
		// No such group, or one this account may not see.
	default:
		in, err = g.check(ctx, name, key[1])
	}
	if ctx.Err() == nil {
		storeIn(g, g.members, key, groupAnswer{member: in, err: err})
	}
	return in, err
}

func (g *CloudIdentityGroups) groupName(ctx context.Context, email string) (string, error) {
	if a, ok := cachedIn(g, g.names, email); ok {
		return a.name, a.err
	}
	svc, err := g.service(ctx)
	if err != nil {
		return "", err
	}
	res, err := svc.Groups.Lookup().GroupKeyId(email).Context(ctx).Do()
	var name string
	switch {
	case err == nil:
		name = res.Name
	case isNotFound(err):
		err = nil
	default:
		err = fmt.Errorf("console: look up group %s: %w", email, err)
	}
	if ctx.Err() == nil {
		storeIn(g, g.names, email, groupAnswer{name: name, err: err})
	}
	return name, err
}

func (g *CloudIdentityGroups) check(ctx context.Context, group, member string) (bool, error) {
	svc, err := g.service(ctx)
	if err != nil {
		return false, err
	}
	// A CEL string literal: an email may hold an apostrophe (o'brien@…).
	q := "member_key_id == '" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(member) + "'"
	res, err := svc.Groups.Memberships.CheckTransitiveMembership(group).Query(q).Context(ctx).Do()
	switch {
	case err == nil:
		return res.HasMembership, nil
	case isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("console: check membership of %s in %s: %w", member, group, err)
}

func isNotFound(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusNotFound
}

func cachedIn[K comparable](g *CloudIdentityGroups, m map[K]groupAnswer, k K) (groupAnswer, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a, ok := m[k]
	if !ok || !g.now().Before(a.until) {
		return groupAnswer{}, false
	}
	return a, true
}

func storeIn[K comparable](g *CloudIdentityGroups, m map[K]groupAnswer, k K, a groupAnswer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(m) >= maxGroupAnswers {
		clear(m)
	}
	ttl := g.ttl
	if a.err != nil {
		ttl = min(ttl, groupErrorTTL)
	}
	a.until = g.now().Add(ttl)
	m[k] = a
}
