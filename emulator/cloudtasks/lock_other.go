//go:build !unix

package cloudtasks

import "os"

// lockDir is a no-op where flock is unavailable.
func lockDir(string) (*os.File, error) { return nil, nil }
