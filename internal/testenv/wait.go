package testenv

import (
	"fmt"
	"testing"
	"time"
)

// pollEvery is how often WaitFor asks again: often enough that a test is not
// slowed by its own polling, rarely enough not to load the emulators.
const pollEvery = 20 * time.Millisecond

// WaitFor asks cond until it returns nil and fails the test with cond's last
// error once timeout has passed. Tests wait on servers that settle in their
// own time (a bridge getting healthy, a stream draining); cond's error says
// what was still wrong, so a timeout reads like any other failed assertion.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// WaitUntil is WaitFor for a condition that only says yes or no: what names
// the awaited state in the failure.
func WaitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitFor(t, timeout, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("still waiting for %s", what)
	})
}

// Await returns what ch delivers and fails the test when nothing arrives
// within timeout: a goroutine that hangs (a server that does not stop, a
// dispatch that never comes) fails the test naming what it awaited instead
// of stalling the test binary until its own timeout.
func Await[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("after %v: still waiting for %s", timeout, what)
		panic("unreachable: Fatalf does not return")
	}
}
