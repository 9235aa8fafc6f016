package suspendclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// systemSuspended returns the function that reads how long the machine has been suspended since
// it booted: CLOCK_BOOTTIME counts suspended time, CLOCK_MONOTONIC does not. The function returns
// 0 if either clock cannot be read, so the clock falls back to Go's own.
func systemSuspended() func() time.Duration {
	return func() time.Duration {
		var boot, mono unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) != nil || unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil {
			return 0
		}
		return time.Duration(boot.Nano() - mono.Nano())
	}
}
