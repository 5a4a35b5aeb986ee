package httpfunc

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/shared/config"
)

// Load reads the shared variables and the function's own with one Reader:
// the shared ones reach Loaded (and the function's read), and a problem in
// each is reported in the same error.
func TestLoad(t *testing.T) {
	base := map[string]string{
		"GOOGLE_CLOUD_PROJECT": "p", "AUTH_MODE": config.AuthNone, "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1",
		"TASKS_QUEUE": "projects/p/locations/l/queues/q", "REPLAY_URL": "http://127.0.0.1:9/Replay",
		"TASKS_SERVICE_ACCOUNT": "tasks@p.iam.gserviceaccount.com",
	}
	type own struct {
		Project string // as read's base saw it
		Limit   int
	}
	read := func(r *config.Reader, b config.HTTPFunction) own {
		return own{Project: b.Project, Limit: r.Int("OWN_LIMIT", 5, 1, 10)}
	}
	tests := []struct {
		name    string
		set     map[string]string // over base; "" unsets
		want    own
		wantErr []string // variables the error names
	}{
		{"defaults", nil, own{Project: "p", Limit: 5}, nil},
		{"own setting", map[string]string{"OWN_LIMIT": "7"}, own{Project: "p", Limit: 7}, nil},
		{"own setting invalid", map[string]string{"OWN_LIMIT": "70"}, own{}, []string{"OWN_LIMIT"}},
		{"both invalid", map[string]string{"OWN_LIMIT": "x", "GOOGLE_CLOUD_PROJECT": ""}, own{}, []string{"OWN_LIMIT", "GOOGLE_CLOUD_PROJECT"}},
	}
	for _, tt := range tests {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range tt.set {
			env[k] = v
		}
		l, err := Load(config.MapLookup(env), read)
		if len(tt.wantErr) == 0 {
			if err != nil || l.Config != tt.want || l.Common.Project != "p" || l.Auth.Mode != config.AuthNone {
				t.Errorf("Load(%s) = %+v, %+v, %+v, %v; want %+v, project p, auth none", tt.name, l.Config, l.Common, l.Auth, err, tt.want)
			}
			continue
		}
		for _, name := range tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Load(%s) error = %v, want it to name %s", tt.name, err, name)
			}
		}
	}
}

// ReadJSON takes one JSON value of the task's shape within the bound and
// refuses anything else, saying why.
func TestReadJSON(t *testing.T) {
	type task struct {
		ID      string `json:"id"`
		Attempt int    `json:"attempt"`
	}
	const max = 32
	tests := []struct {
		name, body string
		want       task
		wantErr    string // "" when it reads
	}{
		{"task", `{"id":"e1","attempt":2}`, task{ID: "e1", Attempt: 2}, ""},
		{"exactly the bound", `{"id":"` + strings.Repeat("a", max-9) + `"}`, task{ID: strings.Repeat("a", max-9)}, ""},
		{"trailing space", `{"id":"e1"}` + "\n", task{ID: "e1"}, ""},
		{"over the bound", `{"id":"` + strings.Repeat("a", max-8) + `"}`, task{}, "larger than 32 bytes"},
		{"empty", ``, task{}, "decode body"},
		{"not JSON", `{`, task{}, "decode body"},
		{"unknown field", `{"id":"e1","url":"x"}`, task{}, "unknown field"},
		{"trailing value", `{"id":"e1"}{}`, task{}, "trailing data"},
		{"stray brace", `{"id":"e1"}}`, task{}, "trailing data"},
		{"stray bracket", `{"id":"e1"}]`, task{}, "trailing data"},
		{"trailing word", `{"id":"e1"} x`, task{}, "trailing data"},
	}
	for _, tt := range tests {
		var got task
		err := ReadJSON(httptest.NewRequest("POST", "/", strings.NewReader(tt.body)), max, &got)
		switch {
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("ReadJSON(%s) = %+v, %v; want %+v", tt.name, got, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ReadJSON(%s) error = %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

// PostOnly lets a POST through untouched and refuses every other method with
// 405, Allow: POST and the function's name.
func TestPostOnly(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodHead} {
		w := httptest.NewRecorder()
		got := PostOnly(w, httptest.NewRequest(method, "/", nil), "deliver")
		want := method == http.MethodPost
		if got != want {
			t.Errorf("PostOnly(%s) = %v, want %v", method, got, want)
			continue
		}
		if want {
			if w.Code != http.StatusOK || w.Body.Len() != 0 || w.Header().Get("Allow") != "" {
				t.Errorf("PostOnly(%s) answered %d %q (Allow %q), want nothing written", method, w.Code, w.Body, w.Header().Get("Allow"))
			}
			continue
		}
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost || (method != http.MethodHead && !strings.Contains(w.Body.String(), "deliver: POST only")) {
			t.Errorf("PostOnly(%s) answered %d %q (Allow %q), want 405, Allow: POST, \"deliver: POST only\"", method, w.Code, w.Body, w.Header().Get("Allow"))
		}
	}
}
