package main

import (
	"time"

	"github.com/jsdlq/jsdlq/shared/config"
)

// hostConfig is the functions host's configuration.
type hostConfig struct {
	Host string // HOST; default 127.0.0.1
	Port int    // PORT; default 8080
	// RequestTimeout is FUNCTIONS_REQUEST_TIMEOUT, a request's deadline
	// (default defaultRequestTimeout, 1s to 1h).
	RequestTimeout time.Duration
}

// defaultRequestTimeout is a functions host request's deadline:
// the longest function timeout Terraform deploys (reconcile's 540 s).
const defaultRequestTimeout = 540 * time.Second

// loadConfig reads the functions host's configuration on the shared
// config.Reader, every problem at once.
func loadConfig(lookup config.Lookup) (hostConfig, error) {
	r := config.NewReader(lookup)
	f := hostConfig{Host: r.String("HOST", "127.0.0.1"), Port: r.Int("PORT", 8080, 1, 65535),
		RequestTimeout: r.Duration("FUNCTIONS_REQUEST_TIMEOUT", defaultRequestTimeout)}
	r.Check(f.RequestTimeout >= time.Second && f.RequestTimeout <= time.Hour, "FUNCTIONS_REQUEST_TIMEOUT", "%s is not between 1s and 1h", f.RequestTimeout)
	return f, r.Err()
}
