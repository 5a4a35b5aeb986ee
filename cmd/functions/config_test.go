package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jsdlq/jsdlq/shared/config"
)

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		env     map[string]string
		want    hostConfig
		wantErr bool
	}{
		{map[string]string{}, hostConfig{Host: "127.0.0.1", Port: 8080, RequestTimeout: defaultRequestTimeout}, false},
		{map[string]string{"HOST": "0.0.0.0", "PORT": "9000", "FUNCTIONS_REQUEST_TIMEOUT": "2m"},
			hostConfig{Host: "0.0.0.0", Port: 9000, RequestTimeout: 2 * time.Minute}, false},
		{map[string]string{"PORT": "http"}, hostConfig{Host: "127.0.0.1", Port: 8080, RequestTimeout: defaultRequestTimeout}, true},
		{map[string]string{"FUNCTIONS_REQUEST_TIMEOUT": "2h"}, hostConfig{Host: "127.0.0.1", Port: 8080, RequestTimeout: 2 * time.Hour}, true},
		{map[string]string{"FUNCTIONS_REQUEST_TIMEOUT": "soon"}, hostConfig{Host: "127.0.0.1", Port: 8080, RequestTimeout: defaultRequestTimeout}, true},
	}
	for _, tt := range tests {
		got, err := loadConfig(config.MapLookup(tt.env))
		if (err != nil) != tt.wantErr {
			t.Errorf("loadConfig(%v) error = %v, want error %v", tt.env, err, tt.wantErr)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("loadConfig(%v) mismatch (-want +got):\n%s", tt.env, diff)
		}
	}
}
