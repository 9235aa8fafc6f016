package lock

import (
	"time"

	"golang.org/x/sys/unix"
)

// defaultClock is the lease clock of a Locker without WithClock: Go's monotonic clock plus the
// time the machine spent suspended.
func defaultClock() *suspendAwareClock { return newSuspendAwareClock(suspendedSinceBoot) }

// suspendedSinceBoot returns how long the machine has been suspended since it booted:
// CLOCK_BOOTTIME counts suspended time, CLOCK_MONOTONIC does not. It returns 0 if either clock
// cannot be read, so the lease clock falls back to Go's own.
func suspendedSinceBoot() time.Duration {
	var boot, mono unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) != nil || unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil {
		return 0
	}
	return time.Duration(boot.Nano() - mono.Nano())
}
