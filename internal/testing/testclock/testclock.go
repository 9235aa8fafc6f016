// Package testclock holds clocks for tests of lease timing.
package testclock

import (
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Ahead is Go's clock read ahead of its own timers by a settable amount: what a lease holder sees
// when a timer fires late or its machine was just resumed. Its timers are Go's, unaffected.
type Ahead struct {
	clock.RealClock
	ahead atomic.Int64
}

var _ clock.WithDelayedExecution = (*Ahead)(nil)

// Set makes readings run d ahead of Go's clock.
func (c *Ahead) Set(d time.Duration) { c.ahead.Store(int64(d)) }

// Now returns Go's clock reading plus the amount set.
func (c *Ahead) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

// Since returns the time elapsed since t on this clock.
func (c *Ahead) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
