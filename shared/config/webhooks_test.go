package config

import (
	"errors"
	"testing"

	"github.com/jsdlq/jsdlq/shared/webhook"
)

// The guard the components build from their configuration gets both
// settings: Local lets a plain-http endpoint through, OwnURLs refuses
// jsdlq's own (by origin and path prefix), and a refusal is ErrRefusedURL.
// webhook's TestGuard covers the guard's rules themselves.
func TestWebhooksGuard(t *testing.T) {
	own := []string{"https://console.example.com/", "http://127.0.0.1:8080/Replay"}
	strict := Webhooks{OwnURLs: own}.Guard()
	local := Webhooks{Local: true, OwnURLs: own}.Guard()
	for _, tt := range []struct {
		url               string
		strictOK, localOK bool
	}{
		{"https://hooks.example.com/jsdlq?token=abc", true, true},
		{"http://127.0.0.1:8081/hook", false, true},
		{"https://Console.Example.com:443/x", false, false},
		{"http://127.0.0.1:8080/Deliver", false, false},
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
