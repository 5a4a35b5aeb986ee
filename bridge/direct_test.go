package bridge

import "testing"

func TestBatchVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		version string
		want    bool
	}{
		{"2.15.2", true},
		{"2.11.0", true},
		{"3.0.0", true},
		{"2.10.24", false},
		{"2.9.0", false},
		{"", false}, // not connected
		{"dev", false},
	}
	for _, tc := range tests {
		if got := batchVersion(tc.version); got != tc.want {
			t.Errorf("batchVersion(%q) = %v, want %v", tc.version, got, tc.want)
		}
	}
}
