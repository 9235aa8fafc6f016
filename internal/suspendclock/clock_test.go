package suspendclock

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Suspension is a suspended-time reading whose total a test sets.
type suspension struct{ total atomic.Int64 }

func (s *suspension) read() time.Duration     { return time.Duration(s.total.Load()) }
func (s *suspension) suspend(d time.Duration) { s.total.Add(int64(d)) }

func TestNewTracksGoClockWhileAwake(t *testing.T) {
	c := New()
	if !c.CountsSuspension() {
		t.Skip("no suspend-counting clock on this system")
	}
	// Nothing is suspended during the test: the reading tracks Go's clock, off by however long
	// the thread was descheduled between the two system clocks' reads (a few ms under load).
	const noise = 20 * time.Millisecond
	before := time.Now()
	now := c.Now()
	after := time.Now()
	if now.Before(before.Add(-noise)) || now.After(after.Add(noise)) {
		t.Fatalf("on an awake machine the clock read %v after Go's clock started and %v before it ended; want within %v",
			now.Sub(before), after.Sub(now), noise)
	}
}

func TestCountingClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s suspension
		c := Counting(s.read)
		start := c.Now()
		s.suspend(time.Hour)
		if d := c.Since(start); d != time.Hour {
			t.Fatalf("after a 1h suspension the clock moved %v", d)
		}
		s.suspend(-time.Minute) // noise: readings never go back
		if d := c.Since(start); d != time.Hour {
			t.Fatalf("clock went back to %v", d)
		}
		s.suspend(time.Minute)

		// A timer whose deadline passes during a suspension fires within one step of it.
		timer := c.NewTimer(10 * time.Minute)
		fired := make(chan struct{})
		c.AfterFunc(10*time.Minute, func() { close(fired) })
		after := c.After(10 * time.Minute)
		time.Sleep(time.Second)
		s.suspend(10 * time.Minute)
		resumed := time.Now()
		<-timer.C()
		<-fired
		<-after
		if d := time.Since(resumed); d > TimerStep {
			t.Fatalf("timers fired %v after the resume, want within %v", d, TimerStep)
		}

		// Stop and Reset leave no stale value behind.
		timer.Reset(time.Second)
		time.Sleep(2 * time.Second)
		if timer.Reset(time.Hour) {
			t.Fatal("Reset of a timer that fired reported it active")
		}
		select {
		case <-timer.C():
			t.Fatal("a value of the deadline before Reset was received")
		case <-time.After(time.Minute):
		}
		if !timer.Stop() {
			t.Fatal("Stop of an armed timer reported it inactive")
		}
	})
}

func TestGoClockAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := Counting(nil)
		if c.CountsSuspension() {
			t.Fatal("a clock without a suspension reading says it counts suspensions")
		}
		start := c.Now()
		<-c.After(3 * time.Second)
		if d := c.Since(start); d != 3*time.Second {
			t.Fatalf("After(3s) fired after %v", d)
		}
	})
}
