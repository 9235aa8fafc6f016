// Package suspendclock is a clock for deadlines that must count the time the machine spent
// suspended. Go's monotonic clock (CLOCK_MONOTONIC on Linux) stops during a suspension, so a
// process resumed after an hour would count only the time it was awake and act on a deadline that
// passed long ago. Clock adds the suspended time, measured with a clock that keeps counting
// through a suspension (CLOCK_BOOTTIME on Linux); its timers notice a deadline that passed during
// a suspension within TimerStep of the resume.
//
// The baton CLI bounds the command it runs under a lock by this clock (the lock package's lease
// clock does the same for leases). What it does not guarantee: outside Linux it is Go's
// monotonic clock, and a reading never says when the machine resumed, only how much time passed.
package suspendclock
