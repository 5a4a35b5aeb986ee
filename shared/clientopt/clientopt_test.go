package clientopt

import (
	"testing"

	"google.golang.org/api/option"
)

func TestOptions(t *testing.T) {
	tests := []struct {
		call string
		got  []option.ClientOption
		want int // 0: nil, so callers can append it to their own options
	}{
		{`CloudTasksOptions("")`, CloudTasksOptions(""), 0},
		{`CloudTasksOptions("127.0.0.1:8123")`, CloudTasksOptions("127.0.0.1:8123"), 3},
		{`PubSubOptions("")`, PubSubOptions(""), 0},
		{`PubSubOptions("127.0.0.1:8682")`, PubSubOptions("127.0.0.1:8682"), 4},
	}
	for _, tt := range tests {
		if len(tt.got) != tt.want || (tt.want == 0 && tt.got != nil) {
			t.Errorf("%s = %d options (nil: %v), want %d", tt.call, len(tt.got), tt.got == nil, tt.want)
		}
	}
}

func TestCloudTasksJWKSURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"127.0.0.1:8123", "http://127.0.0.1:8124/jwks.json"},
		{"localhost:9000", "http://localhost:9001/jwks.json"},
		{"[::1]:8123", "http://[::1]:8124/jwks.json"},
	}
	for _, tt := range tests {
		if got, err := CloudTasksJWKSURL(tt.in); err != nil || got != tt.want {
			t.Errorf("CloudTasksJWKSURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"127.0.0.1", "host:x", "h:65535"} {
		if _, err := CloudTasksJWKSURL(bad); err == nil {
			t.Errorf("CloudTasksJWKSURL(%q) = nil error, want one", bad)
		}
	}
}
