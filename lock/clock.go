package lock

import (
	"k8s.io/utils/clock"

	"github.com/baton-dev/baton/internal/suspendclock"
)

// defaultClock is the lease clock of a Locker without WithClock: Go's monotonic clock plus the time
// the machine spent suspended (package suspendclock), so that a holder suspended for an hour counts
// that hour and finds a lease that ran out long ago lost at once. Outside Linux it is Go's
// monotonic clock, which may stop while the machine is suspended.
func defaultClock() clock.WithDelayedExecution { return suspendclock.New() }
