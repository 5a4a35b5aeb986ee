package config

import (
	"errors"
	"testing"

	"github.com/jsdlq/jsdlq/shared/webhook"
)

// The guard the components build from their configuration decides as the
// settings say: http and local addresses only with Local, never one of
// OwnURLs (by origin and path prefix), and a refusal is ErrRefusedURL.
// webhook's TestGuard covers the guard's rules in full.
func TestWebhooksGuard(t *testing.T) {
	own := []string{"https://jsdlq-replay-123.europe-west1.run.app", "https://console.example.com/", "http://127.0.0.1:8080/Replay"}
	strict := Webhooks{OwnURLs: own}.Guard()
	local := Webhooks{Local: true, OwnURLs: own}.Guard()
	for _, tt := range []struct {
		url               string
		strictOK, localOK bool
	}{
		{"https://hooks.example.com/jsdlq?token=abc", true, true},
		{"https://93.184.216.34:8443/hook", true, true},
		{"http://hooks.example.com/", false, true},
		{"https://127.0.0.1/", false, true},
		{"https://localhost:9000/", false, true},
		{"https://10.1.2.3/", false, true},
		{"https://169.254.169.254/computeMetadata/v1/", false, true},
		{"https://metadata.google.internal/", false, true},
		{"https://jsdlq-replay-123.europe-west1.run.app/other", false, false},
		{"https://Console.Example.com:443/x", false, false},
		{"http://127.0.0.1:8080/Deliver", false, false},
		{"http://127.0.0.1:8081/hook", false, true},
		{"https://user:pw@hooks.example.com/", false, false},
		{"mailto:ops@example.com", false, false},
	} {
		for _, g := range []struct {
			name  string
			guard *webhook.Guard
			ok    bool
		}{{"strict", strict, tt.strictOK}, {"local", local, tt.localOK}} {
			_, err := g.guard.Parse(tt.url)
			if (err == nil) != g.ok {
				t.Errorf("%s Parse(%q) = %v, want ok %v", g.name, tt.url, err, g.ok)
			}
			if err != nil && !errors.Is(err, webhook.ErrRefusedURL) {
				t.Errorf("%s Parse(%q) = %v, want ErrRefusedURL", g.name, tt.url, err)
			}
		}
	}
}
