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

// WaitForEveryAnswer asks until want different answerers have answered (a Service in front of
// want pods: kube-proxy picks one per connection) and returns how long it took. ask returns who
// answered, or an error, which is logged when it differs from the one before (a Service refuses
// until kube-proxy has its endpoints).
func WaitForEveryAnswer(t testing.TB, what string, within time.Duration, want int, ask func() (who string, err error)) time.Duration {
	t.Helper()
	seen := map[string]bool{}
	var lastErr string
	return WaitFor(t, what, within, func() bool {
		who, err := ask()
		if err != nil {
			if err.Error() != lastErr {
				t.Logf("%s: %v", what, err)
				lastErr = err.Error()
			}
			return false
		}
		seen[who] = true
		return len(seen) >= want
	})
}
