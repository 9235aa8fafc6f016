package testenv

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// LeakGrace is how long VerifyTestMain lets goroutines that are still ending finish before it
// calls them leaked: a lease lost at the end of a test gives its owner record back for up to one
// lease (lock.Lease's release loop), and a connection to a control plane that was just stopped
// takes a moment to notice.
const LeakGrace = 5 * time.Second

// VerifyTestMain is goleak.VerifyTestMain for a binary with shared components: it runs the tests,
// then stop (for example Kube.Stop, or nil), and then fails the binary if goroutines other than
// those opts ignore are still running LeakGrace later. It prints the leaked goroutines' stacks,
// and it does not return.
//
// Not checked: goroutines that end within LeakGrace (bounded background work), and anything after
// a failed run (the failure is what matters then).
func VerifyTestMain(m *testing.M, stop func(), opts ...goleak.Option) {
	code := m.Run()
	if stop != nil {
		stop()
	}
	if code == 0 {
		if err := findLeaks(LeakGrace, opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines still running %v after the tests ended: %v\n", LeakGrace, err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks returns goleak.Find's report if goroutines are still running after grace. Each Find
// itself retries for a moment before it reports.
func findLeaks(grace time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(grace)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
