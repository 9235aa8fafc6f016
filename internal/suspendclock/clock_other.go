//go:build !linux

package suspendclock

import "time"

// systemSuspended returns nil outside Linux: Go's monotonic clock, which may stop while the
// machine is suspended, is all there is.
func systemSuspended() func() time.Duration { return nil }
