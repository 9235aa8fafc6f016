package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond every 25ms until it holds, failing the test after within. It returns how long
// the wait took.
func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
	return time.Since(start)
}
