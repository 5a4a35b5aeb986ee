package console

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jsdlq/jsdlq/shared/authority"
	"github.com/jsdlq/jsdlq/shared/outcome"
)

// Every sentinel the console's pages, the tenant API and the triage
// endpoint can meet answers with its outcome's status (shared/outcome), and
// the API's body carries its outcome's code.
func TestEverySentinelAnswersItsOutcome(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	req := httptest.NewRequest(http.MethodGet, "/entries/x", nil)
	for _, sen := range outcome.Sentinels {
		err := fmt.Errorf("operator: approve x: %w", sen.Err)
		want := sen.Outcome

		ui := httptest.NewRecorder()
		s.uiFail(ui, req, authority.Actor{}, "", err)
		if ui.Code != want.HTTP {
			t.Errorf("uiFail(%s) = %d, want %d", sen.Name, ui.Code, want.HTTP)
		}
		for name, fail := range map[string]func(http.ResponseWriter, *http.Request, error){"apiFail": s.apiFail, "triageFail": s.triageFail} {
			rec := httptest.NewRecorder()
			fail(rec, req, err)
			var body apiErrorBody
			if jerr := json.Unmarshal(rec.Body.Bytes(), &body); jerr != nil || body.Error == nil {
				t.Errorf("%s(%s) body %q: %v", name, sen.Name, rec.Body, jerr)
				continue
			}
			if rec.Code != want.HTTP || body.Error.Code != want.Code() {
				t.Errorf("%s(%s) = %d %s, want %d %s", name, sen.Name, rec.Code, body.Error.Code, want.HTTP, want.Code())
			}
			if (rec.Code == http.StatusUnauthorized) != (rec.Header().Get("WWW-Authenticate") != "") {
				t.Errorf("%s(%s) = %d with WWW-Authenticate %q", name, sen.Name, rec.Code, rec.Header().Get("WWW-Authenticate"))
			}
		}
	}
}
