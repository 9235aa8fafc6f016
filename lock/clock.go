package lock

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// timerStep is the longest a timer of the suspend-aware clock sleeps before it looks at the clock
// again: after a machine resumes, a timer whose deadline passed during the suspension fires
// within one step.
const timerStep = 250 * time.Millisecond

// suspendAwareClock is the default lease clock. Go's monotonic clock (CLOCK_MONOTONIC on Linux)
// stops while the machine is suspended, so a holder that was suspended for an hour would count
// only the time it was awake and claim a lease that ran out long ago. This clock adds the time the
// machine spent suspended, measured with a clock that keeps counting through a suspension
// (CLOCK_BOOTTIME on Linux), so readings and timers see the time that really passed. Without such
// a clock (other systems) it is Go's monotonic clock.
type suspendAwareClock struct {
	// suspendedFor reads how long the machine has been suspended in total (since some fixed
	// origin); nil where that cannot be measured.
	suspendedFor func() time.Duration

	mu        sync.Mutex
	base      time.Duration // suspendedFor when the clock was made
	suspended time.Duration // the largest suspension seen since: readings never go back
}

var _ clock.WithDelayedExecution = (*suspendAwareClock)(nil)

// newSuspendAwareClock returns a clock that adds the suspended time measured by suspendedFor (nil
// for none) to Go's clock.
func newSuspendAwareClock(suspendedFor func() time.Duration) *suspendAwareClock {
	c := &suspendAwareClock{suspendedFor: suspendedFor}
	if suspendedFor != nil {
		c.base = suspendedFor()
	}
	return c
}

// Now returns Go's clock reading plus the time the machine spent suspended since the clock was
// made. Differences between readings keep Go's monotonic precision.
func (c *suspendAwareClock) Now() time.Time {
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
func (c *suspendAwareClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// After returns a channel that receives once d has passed on this clock.
func (c *suspendAwareClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// Tick is not used by the lock; it ticks on Go's clock.
func (c *suspendAwareClock) Tick(d time.Duration) <-chan time.Time { return time.Tick(d) }

// Sleep sleeps until d has passed on this clock.
func (c *suspendAwareClock) Sleep(d time.Duration) { <-c.After(d) }

// NewTimer returns a timer that fires once d has passed on this clock.
func (c *suspendAwareClock) NewTimer(d time.Duration) clock.Timer {
	t := &stepTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls f in its own goroutine once d has passed on this clock.
func (c *suspendAwareClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &stepTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// stepTimer fires when its deadline on the clock has passed. It sleeps in steps of at most
// timerStep (when the clock counts suspensions), so a deadline that passed while the machine was
// suspended is noticed soon after it resumes.
type stepTimer struct {
	c  *suspendAwareClock
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
		left = min(left, timerStep)
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
