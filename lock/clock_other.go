//go:build !linux

package lock

// defaultClock is the lease clock of a Locker without WithClock. Outside Linux it is Go's
// monotonic clock, which may stop while the machine is suspended (see suspendAwareClock).
func defaultClock() *suspendAwareClock { return newSuspendAwareClock(nil) }
