package console_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/option"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// fakeGroups is the Cloud Identity Groups API as the console calls it
// (groups:lookup, memberships:checkTransitiveMembership), with members per
// group email, counting its calls.
type fakeGroups struct {
	members map[string][]string // group email -> member emails
	mu      sync.Mutex
	calls   map[string]int // "lookup" / "check" -> calls
	refuse  bool           // answer 403, as without the edition or the grant
}

func (f *fakeGroups) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg}})
	}
	if f.refuse {
		fail(http.StatusForbidden, "the caller does not have permission")
		return
	}
	switch {
	case r.URL.Path == "/v1/groups:lookup":
		f.calls["lookup"]++
		g := r.URL.Query().Get("groupKey.id")
		if _, ok := f.members[g]; !ok {
			fail(http.StatusNotFound, "group not found")
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"name": "groups/" + strings.ReplaceAll(g, "@", "-at-")})
	case strings.HasSuffix(r.URL.Path, "/memberships:checkTransitiveMembership"):
		f.calls["check"]++
		g := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/groups/"), "/memberships:checkTransitiveMembership"), "-at-", "@")
		// The query is a CEL comparison with a single-quoted literal.
		q := r.URL.Query().Get("query")
		lit, prefixed := strings.CutPrefix(q, "member_key_id == '")
		lit, quoted := strings.CutSuffix(lit, "'")
		if !prefixed || !quoted {
			fail(http.StatusBadRequest, "malformed query "+q)
			return
		}
		member := strings.NewReplacer(`\'`, "'", `\\`, `\`).Replace(lit)
		in := false
		for _, m := range f.members[g] {
			in = in || m == member
		}
		json.NewEncoder(w).Encode(map[string]bool{"hasMembership": in})
	default:
		fail(http.StatusNotFound, "no such method "+r.URL.Path)
	}
}

func (f *fakeGroups) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// iap signs IAP assertions for the console's audience with a test key.
type iap struct {
	t   *testing.T
	key *ecdsa.PrivateKey
	aud string
}

func (i iap) assertion(email, hd string) string {
	now := time.Now()
	c := jwt.MapClaims{"iss": console.IAPIssuer, "aud": i.aud, "sub": "accounts.google.com:" + email, "email": "accounts.google.com:" + email,
		"iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
	if hd != "" {
		c["hd"] = hd
	}
	return testenv.SignJWT(i.t, i.key, "k1", c)
}

// as is a browser whose every request carries IAP's assertion for email.
func (i iap) as(base, email, hd string) *browser {
	b := newBrowser(i.t, base)
	b.c.Transport = assertionTransport{assertion: i.assertion(email, hd)}
	return b
}

type assertionTransport struct{ assertion string }

func (a assertionTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(console.IAPHeader, a.assertion)
	return http.DefaultTransport.RoundTrip(r)
}

// The console's roles behind IAP, with assertions signed by a test key and
// groups resolved through the Cloud Identity client against a fake API:
// a viewer (by its domain) sees pages but every form answers 403 and its
// pages show no form; an operator (by a group) may not approve a
// governance entry (403) but approves a permanent one and discards; an
// approver (by its email) approves governance; an identity of no role is
// refused everything. The history records actor and role.
func TestConsoleRoles(t *testing.T) {
	groups := &fakeGroups{members: map[string][]string{"oncall@example.com": {"oscar@example.com"}}, calls: map[string]int{}}
	api := httptest.NewServer(groups)
	t.Cleanup(api.Close)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signer := iap{t: t, key: key, aud: "/projects/1/locations/r/services/console"}
	roles, err := console.NewRoles(map[authority.Role][]string{
		authority.Approver: {"user:boss@example.com"},
		authority.Operator: {"group:oncall@example.com", "group:gone@example.com"},
		authority.Viewer:   {"domain:example.com"},
	}, console.RoleOptions{Groups: console.NewCloudIdentityGroups(time.Minute, option.WithEndpoint(api.URL+"/"), option.WithoutAuthentication())})
	if err != nil {
		t.Fatal(err)
	}
	auth := console.NewRoleAuth(console.NewIAPAuth(signer.aud, keys{"k1": &key.PublicKey}, nil), roles)
	e := newEnv(t, auth)
	ctx := testenv.Context(t)
	e.seed(t, "acme", "TASKS.1", store.AwaitingApproval, `{"g":1}`, ruled("governance", triage.Governance))
	e.seed(t, "acme", "TASKS.2", store.Escalated, `{"p":2}`, ruled("permanent", triage.Permanent))
	e.seed(t, "acme", "TASKS.3", store.Scheduled, `{"s":3}`, ruled("transient", triage.Transient))
	e.seed(t, "acme", "TASKS.4", store.Quarantined, `{"q":4}`, ruled("poison", triage.Poison))

	viewer := signer.as(e.srv.URL, "vera@example.com", "example.com")
	operator := signer.as(e.srv.URL, "oscar@example.com", "example.com")
	approver := signer.as(e.srv.URL, "boss@example.com", "example.com")
	nobody := signer.as(e.srv.URL, "eve@other.example", "")

	// Nobody: authenticated, but no role: every page and form is 403.
	for _, path := range []string{"/", "/entries/TASKS.1", "/tenants"} {
		if code, body := nobody.get(path); code != http.StatusForbidden || !strings.Contains(body, "no console role") {
			t.Errorf("GET %s with no role = %d %q, want 403 saying there is no role", path, code, body)
		}
	}
	// The viewer reads every page, each naming it with its role, and is
	// shown no form.
	for _, path := range []string{"/", "/entries", "/entries/TASKS.1", "/entries/TASKS.3", "/tenants", "/bulk?tenant=acme", "/policy?entry=TASKS.1"} {
		code, body := viewer.get(path)
		if code != 200 || !strings.Contains(body, "vera@example.com (viewer)") {
			t.Errorf("viewer GET %s = %d, want 200 naming vera@example.com (viewer)", path, code)
		}
		if strings.Contains(body, `method="post"`) {
			t.Errorf("viewer GET %s shows a form:\n%s", path, body)
		}
	}
	// Every form the viewer posts is 403 (before its CSRF token is even
	// looked at), and changes nothing.
	before := e.snapshot(t)
	for path, form := range map[string]url.Values{
		"/entries/TASKS.1/approve":                     {"step": {"confirm"}},
		"/entries/TASKS.2/approve":                     {"step": {"preview"}},
		"/entries/TASKS.3/replay":                      {},
		"/entries/TASKS.2/discard":                     {"reason": {"looked at it"}, "confirm": {"yes"}},
		"/entries/TASKS.3/probe":                       {"reason": {"try"}},
		"/selected-entries":                            {"id": {"TASKS.3"}, "action": {"replay"}},
		"/tenants/acme/close":                          {"reason": {"fine"}},
		"/bulk":                                        {"tenant": {"acme"}, "why": {"all of them"}},
		"/bulk/" + strings.Repeat("a", 32) + "/cancel": {},
	} {
		form.Set("csrf", viewer.csrf)
		if code, _, body := viewer.post(path, form); code != http.StatusForbidden || !strings.Contains(body, "viewer role") {
			t.Errorf("viewer POST %s = %d, want 403 naming the viewer role:\n%.300s", path, code, body)
		}
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("the viewer's forms changed state (-before +after):\n%s", diff)
	}
	if runs, err := e.st.ListBulkRuns(ctx, 10); err != nil || len(runs) != 0 {
		t.Errorf("the viewer's forms stored %d bulk runs (%v)", len(runs), err)
	}

	// The operator (through the group): the governance entry's page shows
	// no approve form and says why; approving it anyway is 403 and
	// changes nothing.
	code, body := operator.get("/entries/TASKS.1")
	if code != 200 || strings.Contains(body, `action="/entries/TASKS.1/approve"`) || !strings.Contains(body, `rule &#34;governance&#34; does not let the operator role approve`) ||
		!strings.Contains(body, `action="/entries/TASKS.1/discard"`) || !strings.Contains(body, "oscar@example.com (operator)") {
		t.Errorf("operator's governance entry page = %d, want no approve form, the reason, a discard form:\n%s", code, body)
	}
	before = e.snapshot(t)
	for _, step := range []string{"preview", "confirm"} {
		code, _, body := operator.post("/entries/TASKS.1/approve", url.Values{"csrf": {operator.csrf}, "step": {step}})
		if code != http.StatusForbidden || !strings.Contains(body, "permission denied") || !strings.Contains(body, "governance") {
			t.Errorf("operator approves governance (%s) = %d, want 403 permission denied naming the rule:\n%.400s", step, code, body)
		}
	}
	if code, _, body := operator.post("/entries/TASKS.4/approve", url.Values{"csrf": {operator.csrf}, "step": {"confirm"}}); code != http.StatusForbidden {
		t.Errorf("operator approves poison = %d, want 403:\n%.300s", code, body)
	}
	// Nor may an operator opt a bulk redrive into the entries kept for
	// approvers.
	if _, body := operator.get("/bulk?tenant=acme"); strings.Contains(body, `id="bulk-optin"`) || !strings.Contains(body, `id="bulk-confirm"`) {
		t.Errorf("operator's bulk plan: want a confirm form and no opt-in:\n%s", body)
	}
	if code, _, body := operator.post("/bulk", url.Values{"csrf": {operator.csrf}, "tenant": {"acme"}, "include": {"approver-rules"}, "why": {"all"}}); code != http.StatusForbidden {
		t.Errorf("operator's bulk redrive with the opt-in = %d, want 403:\n%.300s", code, body)
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("the operator's refused approvals changed state (-before +after):\n%s", diff)
	}
	// What an operator may: approve a permanent entry, discard poison.
	if code, _, body := operator.post("/entries/TASKS.2/approve", url.Values{"csrf": {operator.csrf}, "step": {"confirm"}}); code != http.StatusSeeOther {
		t.Errorf("operator approves permanent = %d, want 303:\n%.300s", code, body)
	}
	if code, _, body := operator.post("/entries/TASKS.4/discard", url.Values{"csrf": {operator.csrf}, "reason": {"broken for good"}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Errorf("operator discards poison = %d, want 303:\n%.300s", code, body)
	}

	// The approver approves governance: preview, then confirm.
	code, body = approver.get("/entries/TASKS.1")
	if code != 200 || !strings.Contains(body, `action="/entries/TASKS.1/approve"`) || !strings.Contains(body, "boss@example.com (approver)") {
		t.Errorf("approver's governance entry page = %d, want an approve form:\n%s", code, body)
	}
	if code, _, body := approver.post("/entries/TASKS.1/approve", url.Values{"csrf": {approver.csrf}, "step": {"preview"}}); code != 200 {
		t.Fatalf("approver previews governance = %d:\n%.300s", code, body)
	}
	if code, _, body := approver.post("/entries/TASKS.1/approve", url.Values{"csrf": {approver.csrf}, "step": {"confirm"}}); code != http.StatusSeeOther {
		t.Fatalf("approver approves governance = %d:\n%.300s", code, body)
	}

	// History records actor and role, and the entry page shows them.
	for id, want := range map[string]authority.Actor{
		"TASKS.1": {Name: "boss@example.com", Role: authority.Approver},
		"TASKS.2": {Name: "oscar@example.com", Role: authority.Operator},
		"TASKS.4": {Name: "oscar@example.com", Role: authority.Operator},
	} {
		en, err := e.st.GetMeta(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		acted := false
		for _, h := range en.History {
			acted = acted || h.Actor() == want
		}
		if !acted {
			t.Errorf("%s history %+v, want a transition by %s", id, en.History, want)
		}
		if _, body := viewer.get("/entries/" + id); !strings.Contains(body, "by "+want.Name+` <span class="role">(`+string(want.Role)+")</span>") {
			t.Errorf("%s page does not show %s in the history", id, want)
		}
	}

	// Each identity's membership was checked once (oscar, vera and eve
	// against the oncall group), and cached since; the group that does
	// not exist was looked up once, and has no members to check.
	if got := groups.count("check"); got != 3 {
		t.Errorf("membership checks = %d, want 3 (oscar, vera, eve, each once)", got)
	}
	if got := groups.count("lookup"); got != 2 {
		t.Errorf("group lookups = %d, want 2 (oncall and gone, each once)", got)
	}
}

// RoleOf takes the highest role whose principals match; a group whose
// membership cannot be checked grants nothing; no match is ErrNoRole.
func TestRoleOf(t *testing.T) {
	groups := &fakeGroups{members: map[string][]string{"ops@example.com": {"oscar@example.com", "boss@example.com", "o'brien@example.com"}}, calls: map[string]int{}}
	api := httptest.NewServer(groups)
	t.Cleanup(api.Close)
	checker := func() console.GroupChecker {
		return console.NewCloudIdentityGroups(time.Minute, option.WithEndpoint(api.URL+"/"), option.WithoutAuthentication())
	}
	principals := map[authority.Role][]string{
		authority.Approver: {"user:Boss@Example.com", "serviceAccount:robot@p.iam.gserviceaccount.com"},
		authority.Operator: {"group:ops@example.com"},
		authority.Viewer:   {"domain:example.com", "user:auditor@partner.example"},
	}
	roles, err := console.NewRoles(principals, console.RoleOptions{Groups: checker()})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id   console.Identity
		want authority.Role
	}{
		{console.Identity{Email: "boss@example.com", Domain: "example.com"}, authority.Approver}, // user beats its group and domain
		{console.Identity{Email: "robot@p.iam.gserviceaccount.com"}, authority.Approver},
		{console.Identity{Email: "oscar@example.com", Domain: "example.com"}, authority.Operator},
		{console.Identity{Email: "o'brien@example.com"}, authority.Operator}, // quoted in the API's query
		{console.Identity{Email: "vera@example.com", Domain: "example.com"}, authority.Viewer},
		{console.Identity{Email: "auditor@partner.example", Domain: "partner.example"}, authority.Viewer},
		{console.Identity{Email: "eve@example.com"}, ""}, // the email's domain is not the account's domain
		{console.Identity{Email: "eve@other.example", Domain: "other.example"}, ""},
	}
	for _, tt := range tests {
		got, err := roles.RoleOf(context.Background(), tt.id)
		if got != tt.want || (tt.want == "") != errors.Is(err, console.ErrNoRole) {
			t.Errorf("RoleOf(%+v) = %q, %v, want %q", tt.id, got, err, tt.want)
		}
	}

	// The API refuses (no edition, no grant): the group grants nothing,
	// the other principals still do.
	groups.mu.Lock()
	groups.refuse = true
	groups.mu.Unlock()
	refused, err := console.NewRoles(principals, console.RoleOptions{Groups: checker()})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := refused.RoleOf(context.Background(), console.Identity{Email: "oscar@example.com", Domain: "example.com"}); got != authority.Viewer || err != nil {
		t.Errorf("RoleOf(oscar) with the groups API refusing = %q, %v, want viewer (by the domain)", got, err)
	}
	if got, err := refused.RoleOf(context.Background(), console.Identity{Email: "oscar@elsewhere.example"}); got != "" || !errors.Is(err, console.ErrNoRole) {
		t.Errorf("RoleOf(oscar elsewhere) with the groups API refusing = %q, %v, want ErrNoRole", got, err)
	}

	// Configuration mistakes are refused when the roles are built.
	for name, bad := range map[string]map[authority.Role][]string{
		"a tenant role":        {authority.Tenant: {"user:a@example.com"}},
		"a bare email":         {authority.Operator: {"a@example.com"}},
		"allUsers":             {authority.Viewer: {"allUsers"}},
		"a domain with an at":  {authority.Viewer: {"domain:a@example.com"}},
		"a group that is none": {authority.Operator: {"group:ops"}},
	} {
		if _, err := console.NewRoles(bad, console.RoleOptions{Groups: checker()}); err == nil {
			t.Errorf("NewRoles(%s) = nil error, want it refused", name)
		}
	}
	if _, err := console.NewRoles(map[authority.Role][]string{authority.Operator: {"group:ops@example.com"}}, console.RoleOptions{}); err == nil {
		t.Error("NewRoles(a group, no checker) = nil error, want it refused")
	}
}

func TestParsePrincipal(t *testing.T) {
	for in, want := range map[string]console.Principal{
		"user:Alice@Example.com":                      {Kind: "user", Value: "alice@example.com"},
		" group:ops@example.com ":                     {Kind: "group", Value: "ops@example.com"},
		"domain:example.com":                          {Kind: "domain", Value: "example.com"},
		"user:o'brien@example.com":                    {Kind: "user", Value: "o'brien@example.com"},
		"serviceAccount:ci@p.iam.gserviceaccount.com": {Kind: "serviceAccount", Value: "ci@p.iam.gserviceaccount.com"},
	} {
		got, err := console.ParsePrincipal(in)
		if err != nil || got != want {
			t.Errorf("ParsePrincipal(%q) = %+v, %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "alice@example.com", "allUsers", "allAuthenticatedUsers", "user:", "user:alice", "user:a@b@c",
		"group:@example.com", "domain:example", "domain:", "owner:alice@example.com", "user:alice @example.com", "user:a,b@example.com", `user:a\b@example.com`, `user:"a"@example.com`} {
		if got, err := console.ParsePrincipal(bad); err == nil {
			t.Errorf("ParsePrincipal(%q) = %+v, want an error", bad, got)
		}
	}
}
