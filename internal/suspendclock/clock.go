package suspendclock

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// TimerStep is the longest a timer of a counting Clock sleeps before it looks at the clock again:
// after a machine resumes, a timer whose deadline passed during the suspension fires within one
// step.
const TimerStep = 250 * time.Millisecond

// Clock is Go's monotonic clock plus the time the machine spent suspended since the Clock was
// made. Only differences between its readings are meaningful. Safe for concurrent use.
type Clock struct {
	// suspendedFor reads how long the machine has been suspended in total (since some fixed
	// origin); nil where that cannot be measured.
	suspendedFor func() time.Duration

	mu        sync.Mutex
	base      time.Duration // suspendedFor when the clock was made
	suspended time.Duration // the largest suspension seen since: readings never go back
}

var _ clock.WithDelayedExecution = (*Clock)(nil)

// New returns the system's suspend-aware clock: on Linux it counts the suspended time that
// CLOCK_BOOTTIME counts and CLOCK_MONOTONIC does not; elsewhere it is Go's monotonic clock.
func New() *Clock { return Counting(systemSuspended()) }

// Counting returns a clock that adds the suspended time measured by suspendedFor (nil for none) to
// Go's clock: the total time the machine was suspended, from any fixed origin. Tests pass a
// function whose total they set.
func Counting(suspendedFor func() time.Duration) *Clock {
	c := &Clock{suspendedFor: suspendedFor}
	if suspendedFor != nil {
		c.base = suspendedFor()
	}
	return c
}

// CountsSuspension reports whether the clock measures suspended time (false: Go's clock alone).
func (c *Clock) CountsSuspension() bool { return c.suspendedFor != nil }

// Now returns Go's clock reading plus the time the machine spent suspended since the clock was
// made. Differences between readings keep Go's monotonic precision.
func (c *Clock) Now() time.Time {
	now := time.Now()
	if c.suspendedFor == nil {
		return now
	}
	s := c.suspendedFor() - c.base
	c.mu.Lock()
	defer c.mu.Unlock()
	// Reading noise (the two clocks behind suspendedFor are not read at one instant) is
	// ratcheted, never accumulated.
	c.suspended = max(c.suspended, s)
	return now.Add(c.suspended)
}

// Since returns the time elapsed since t, a reading of this clock.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// After returns a channel that receives once d has passed on this clock.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// Tick ticks on Go's clock, not on this one: it is here to satisfy clock.Clock.
func (c *Clock) Tick(d time.Duration) <-chan time.Time { return time.Tick(d) }

// Sleep sleeps until d has passed on this clock.
func (c *Clock) Sleep(d time.Duration) { <-c.After(d) }

// NewTimer returns a timer that fires once d has passed on this clock.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	t := &stepTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls f in its own goroutine once d has passed on this clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &stepTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// stepTimer fires when its deadline on the clock has passed. It sleeps in steps of at most
// TimerStep (when the clock counts suspensions), so a deadline that passed while the machine was
// suspended is noticed soon after it resumes.
type stepTimer struct {
	c  *Clock
	ch chan time.Time // NewTimer
	f  func()         // AfterFunc

	mu       sync.Mutex
	deadline time.Time
	t        *time.Timer
	active   bool
	gen      int // which Reset the running Go timer belongs to
}

func (t *stepTimer) C() <-chan time.Time { return t.ch }

// Stop stops the timer and reports whether it was active. Like Go 1.23 timers, no value of an
// earlier deadline is received after Stop returns.
func (t *stepTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopLocked()
}

func (t *stepTimer) stopLocked() bool {
	was := t.active
	t.active = false
	t.gen++
	if t.t != nil {
		t.t.Stop()
	}
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	return was
}

// Reset makes the timer fire once d has passed from now; it reports whether it was active.
func (t *stepTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.stopLocked()
	t.deadline = t.c.Now().Add(d)
	t.active = true
	t.armLocked(d)
	return was
}

func (t *stepTimer) armLocked(left time.Duration) {
	if t.c.suspendedFor != nil {
		left = min(left, TimerStep)
	}
	gen := t.gen
	t.t = time.AfterFunc(max(left, 0), func() { t.fire(gen) })
}

// fire runs when a step ends: it fires the timer if the deadline passed, else sleeps another step.
func (t *stepTimer) fire(gen int) {
	t.mu.Lock()
	if !t.active || gen != t.gen {
		t.mu.Unlock()
		return
	}
	now := t.c.Now()
	if left := t.deadline.Sub(now); left > 0 {
		t.armLocked(left)
		t.mu.Unlock()
		return
	}
	t.active = false
	if t.f == nil {
		// Sent under the lock, so that Stop and Reset never leave a stale value behind.
		select {
		case t.ch <- now:
		default:
		}
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.f() // already in the Go timer's own goroutine
}
