package coretest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/jsdlq/jsdlq/console"
	"github.com/jsdlq/jsdlq/internal/testenv"
	jevent "github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// hostileCase is one dead task of the corpus: a hostile name in one of
// its name fields, or a hostile stream.
type hostileCase struct {
	name   string
	field  string // "tenant", "agent", "task_type" or "stream"
	value  string
	valid  bool
	stream string
}

func hostileCases() []hostileCase {
	var out []hostileCase
	for _, field := range []string{"tenant", "agent", "task_type"} {
		for _, h := range testenv.HostileNames() {
			valid := h.Valid || (field != "tenant" && h.Value == jevent.ReservedTenant)
			out = append(out, hostileCase{name: field + "/" + h.Name, field: field, value: h.Value, valid: valid, stream: jevent.DefaultWorkStream})
		}
	}
	for _, s := range testenv.HostileStreams() {
		out = append(out, hostileCase{name: "stream/" + s, field: "stream", value: s, valid: true, stream: s})
	}
	return out
}

// event is the explicit event the bridge forwards for the record of case
// i: built by the bridge's own code (event.Record.Event).
func (hc hostileCase) event(i int) jevent.Event {
	h := map[string][]string{jevent.HeaderTaskID: {fmt.Sprintf("task-%d", i)}}
	tenant := fmt.Sprintf("tenant-%d", i)
	switch hc.field {
	case "tenant":
		tenant = hc.value
	case "agent":
		h[jevent.HeaderAgent] = []string{hc.value}
	case "task_type":
		h[jevent.HeaderTaskType] = []string{hc.value}
	}
	h[jevent.HeaderTenant] = []string{tenant}
	r := jevent.Record{Meta: jevent.RecordMeta{Schema: jevent.RecordSchema, Stream: hc.stream, StreamSeq: uint64(100 + i), Consumer: "worker",
		Subject: "agents.writer.tasks.blog_post", PublishedAt: time.Now().UTC(), Failure: jevent.Failure{Code: "impossible_task", Agent: "writer"}},
		Headers: h, Data: []byte(`{"i":` + fmt.Sprint(i) + `}`)}
	return r.Event(jevent.DefaultConventions, time.Now())
}

// Names from the wire are data on every surface. Each dead task of the
// corpus (a path-shaped, escaped, control, bidirectional, non-UTF-8,
// reserved, 1,600- or 10,000-byte tenant, agent or task type; a stream
// that needs encoding) is forwarded as the bridge forwards it, classified
// on the Firestore emulator and then read through the console's pages,
// links and forms, the tenant API, its document ids, dlqctl and the logs:
// every task has an entry (under the reserved tenant, flagged, when a name
// breaks the rule), and every link and form stays on its own resource.
func TestHostileNamesAreData(t *testing.T) {
	c := newCore(t)
	ctx := testenv.Context(t)
	cases := hostileCases()

	// Capture and classify: every dead task has an entry.
	entries := map[string]*store.Entry{} // by case name
	for i, hc := range cases {
		ev := hc.event(i)
		en, err := c.classifyEvent(ctx, ev)
		if err != nil {
			t.Errorf("%s: %v: the dead task has no entry", hc.name, err)
			continue
		}
		entries[hc.name] = en
		// Document ids: within Firestore's limit, and the event id back.
		if back, err := store.EventID(en.ID); err != nil || back != ev.ID || len(en.ID) > store.MaxIDBytes {
			t.Errorf("%s: entry id %q reads back as %q, %v", hc.name, en.ID, back, err)
		}
		if _, err := c.st.GetBreaker(ctx, en.Tenant); err != nil {
			t.Errorf("%s: breaker of tenant %q: %v", hc.name, en.Tenant, err)
		}
		switch {
		case hc.valid:
			if en.Tenant == jevent.ReservedTenant || len(en.InvalidNames) > 0 {
				t.Errorf("%s: entry under %q flagged %+v, want the valid name kept", hc.name, en.Tenant, en.InvalidNames)
			}
			want := map[string]string{"tenant": en.Tenant, "agent": en.Agent, "task_type": en.TaskType, "stream": en.Stream}[hc.field]
			if want != hc.value {
				t.Errorf("%s: entry %s = %q, want %q", hc.name, hc.field, want, hc.value)
			}
		default:
			if en.Tenant != jevent.ReservedTenant || len(en.InvalidNames) != 1 {
				t.Errorf("%s: entry under %q with %+v, want the reserved tenant and the name flagged", hc.name, en.Tenant, en.InvalidNames)
				continue
			}
			n := en.InvalidNames[0]
			if n.Field != hc.field || n.Size != len(hc.value) || !strings.HasPrefix(hc.value, n.Original()) || len(n.Original()) == 0 {
				t.Errorf("%s: flagged %+v (original %q), want field %s and the name as carried", hc.name, n, n.Original(), hc.field)
			}
		}
	}

	// The console: every entry's page, and every tenant's list, through
	// links and forms that stay on their own resource.
	op := operator.New(c.st, nil)
	srv := httptest.NewServer(console.New(c.st, op, console.LocalAuth("ops@example.com")).Handler())
	t.Cleanup(srv.Close)
	byTenant := map[string][]string{}
	for name, en := range entries {
		byTenant[en.Tenant] = append(byTenant[en.Tenant], en.ID)
		path, err := jevent.URLPath("entries", en.ID)
		if err != nil {
			t.Errorf("%s: URLPath(entries, %q) = %v", name, en.ID, err)
			continue
		}
		page := get(t, srv.URL+path, http.StatusOK)
		if !strings.Contains(page, "<title>Entry "+html.EscapeString(en.ID)) {
			t.Errorf("%s: GET %s is not the page of %s", name, path, en.ID)
		}
		for _, link := range testenv.Links(t, srv.URL+path, page) {
			l := link.To
			seg := testenv.Segments(t, l)
			if len(seg) >= 2 && seg[0] == "entries" && seg[1] != en.ID {
				t.Errorf("%s: the page of %s links to %s", name, en.ID, l)
			}
			if l.Path == "/policy" && l.RawQuery != "" && l.Query().Get("entry") != en.ID {
				t.Errorf("%s: the page of %s tests %q against the policy", name, en.ID, l.Query().Get("entry"))
			}
		}
		if len(en.InvalidNames) > 0 && !strings.Contains(page, `id="invalid-names"`) {
			t.Errorf("%s: the page of %s does not show its invalid names", name, en.ID)
		}
	}
	for tenant, ids := range byTenant {
		list := "/entries?" + url.Values{"tenant": {tenant}}.Encode()
		page := get(t, srv.URL+list, http.StatusOK)
		listed := map[string]bool{}
		for _, l := range testenv.Links(t, srv.URL+list, page) {
			if seg := testenv.Segments(t, l.To); len(seg) == 2 && seg[0] == "entries" {
				listed[seg[1]] = true
			}
		}
		for _, id := range ids {
			if !listed[id] {
				t.Errorf("the list of tenant %q has no link to its entry %s", tenant, id)
			}
		}
		if len(listed) != len(ids) {
			t.Errorf("the list of tenant %q links to %d entries, want its %d", tenant, len(listed), len(ids))
		}
	}

	// The tenant API: a valid name is a tenant with its own key and path;
	// the reserved one has neither.
	for tenant, ids := range byTenant {
		path, err := jevent.URLPath("api", "v1", "tenants", tenant, "entries")
		if err != nil {
			t.Fatal(err)
		}
		if tenant == jevent.ReservedTenant {
			if _, _, err := c.st.CreateTenantKey(ctx, tenant, "coretest"); err == nil {
				t.Errorf("a tenant key was made for the reserved tenant")
			}
			apiGet(t, srv.URL+path, "jsdlq_0123456789abcdef_x", http.StatusBadRequest)
			continue
		}
		key, _, err := c.st.CreateTenantKey(ctx, tenant, "coretest")
		if err != nil {
			t.Errorf("CreateTenantKey(%q) = %v", tenant, err)
			continue
		}
		var list struct {
			Entries []struct {
				ID, Tenant string
			}
		}
		if err := json.Unmarshal([]byte(apiGet(t, srv.URL+path, key, http.StatusOK)), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Entries) != len(ids) {
			t.Errorf("GET %s lists %d entries, want the tenant's %d", path, len(list.Entries), len(ids))
		}
		for _, e := range list.Entries {
			if e.Tenant != tenant {
				t.Errorf("GET %s lists an entry of tenant %q", path, e.Tenant)
			}
			one, err := jevent.URLPath("api", "v1", "tenants", tenant, "entries", e.ID)
			if err != nil {
				t.Fatal(err)
			}
			apiGet(t, srv.URL+one, key, http.StatusOK)
		}
	}

	// dlqctl: what it prints of these entries holds no raw control,
	// format or invalid byte, whatever the names.
	for name, en := range entries {
		if en.Tenant != jevent.ReservedTenant && en.Stream == jevent.DefaultWorkStream {
			continue // the valid names print as they are
		}
		out := c.dlqctlRun(t, "show", en.ID)
		testenv.CheckVisible(t, "dlqctl show "+name, out)
		if len(en.InvalidNames) > 0 && !strings.Contains(out, "invalid     "+en.InvalidNames[0].Field) {
			t.Errorf("dlqctl show %s (%s) does not show the invalid name:\n%s", en.ID, name, out)
		}
		testenv.CheckVisible(t, "dlqctl show --json "+name, c.dlqctlRun(t, "show", en.ID, "--json"))
	}
	testenv.CheckVisible(t, "dlqctl ls --tenant (invalid)", c.dlqctlRun(t, "ls", "--tenant", jevent.ReservedTenant, "--limit", "1000"))
	testenv.CheckVisible(t, "dlqctl ls", c.dlqctlRun(t, "ls", "--limit", "1000"))
	for _, h := range testenv.HostileNames() {
		if h.Valid || h.Value == jevent.ReservedTenant {
			continue // a tenant an operator may list
		}
		cmd := exec.Command(dlqctl(t), "ls", "--tenant", h.Value)
		cmd.Env = c.dlqctlEnv(t)
		if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("dlqctl ls --tenant %q = %v, want the usage exit code 2", h.Value, err)
		}
	}

	// Logs: every line classify wrote is one JSON object whose strings
	// hold no invisible character.
	c.logs.CheckVisibleLines(t, "classify")
	if got := len(c.logs.Lines("names break the naming rule")); got == 0 {
		t.Error("classify logged no warning for the entries recorded under the reserved tenant")
	}
}

func get(t *testing.T, u string, want int) string {
	t.Helper()
	return apiGet(t, u, "", want)
}

func apiGet(t *testing.T, u, key string, want int) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Errorf("GET %s = %d, want %d:\n%.300s", u, resp.StatusCode, want, b)
	}
	return string(b)
}

func (c *core) dlqctlEnv(t *testing.T) []string {
	return append(os.Environ(), "GOOGLE_CLOUD_PROJECT="+c.project, "FIRESTORE_EMULATOR_HOST="+testenv.FirestoreHost(t),
		"DLQCTL_TENANT=", "DLQCTL_ACTOR=coretest")
}

// dlqctlRun runs dlqctl with args against the test's project and returns
// its standard output.
func (c *core) dlqctlRun(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(dlqctl(t), args...)
	cmd.Env = c.dlqctlEnv(t)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Errorf("dlqctl %q: %v\n%s", args, err, stderr)
	}
	return string(out)
}
