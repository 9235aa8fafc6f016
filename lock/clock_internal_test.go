package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeSuspension is a suspendedFor whose total the test sets.
type fakeSuspension struct{ total atomic.Int64 }

func (f *fakeSuspension) read() time.Duration     { return time.Duration(f.total.Load()) }
func (f *fakeSuspension) suspend(d time.Duration) { f.total.Add(int64(d)) }

func TestDefaultClockCountsSuspension(t *testing.T) {
	l, err := New(&oneRecordStore{}, Owner{Identity: "a", Incarnation: "1"})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := l.opts.clock.(*suspendAwareClock)
	if !ok {
		t.Fatalf("default lease clock is %T, want the suspend-aware clock", l.opts.clock)
	}
	if c.suspendedFor == nil {
		t.Skip("no suspend-counting clock on this system")
	}
	// Nothing is suspended during the test: the reading tracks Go's clock. suspendedFor reads two
	// system clocks one after the other, so a reading is off by however long the thread was
	// descheduled between them: well under a millisecond on an idle machine, a few on a loaded
	// one (2.6 ms seen here with a build running beside the tests). A suspension counted wrongly
	// would be off by far more.
	const noise = 20 * time.Millisecond
	a, b := c.suspendedFor(), c.suspendedFor()
	if d := b - a; d < -noise || d > noise {
		t.Fatalf("suspended time moved by %v between two reads on an awake machine", d)
	}
	before := time.Now()
	now := c.Now()
	after := time.Now()
	if now.Before(before.Add(-noise)) || now.After(after.Add(noise)) {
		t.Fatalf("on an awake machine the clock read %v after Go's clock started and %v before it ended; want within %v", now.Sub(before), after.Sub(now), noise)
	}
}

func TestSuspendAwareClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSuspension
		c := newSuspendAwareClock(s.read)
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
		time.Sleep(time.Second)
		s.suspend(10 * time.Minute)
		resumed := time.Now()
		<-timer.C()
		<-fired
		if d := time.Since(resumed); d > timerStep {
			t.Fatalf("timers fired %v after the resume, want within %v", d, timerStep)
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

// TestLeaseCountsSuspension: a holder whose machine was suspended past its lease finds its lease
// invalid at once on resume and lost within one timer step.
func TestLeaseCountsSuspension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSuspension
		l, err := New(&oneRecordStore{}, Owner{Identity: "a", Incarnation: "1"}, WithLease(15*time.Second),
			WithClock(newSuspendAwareClock(s.read)))
		if err != nil {
			t.Fatal(err)
		}
		lease, err := l.Acquire(context.Background(), "x")
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		time.Sleep(time.Second)
		s.suspend(time.Hour)
		resumed := time.Now()
		if lease.Valid() {
			t.Fatalf("lease valid for %v after a one-hour suspension", lease.Remaining())
		}
		<-lease.Done()
		if d := time.Since(resumed); d > timerStep {
			t.Fatalf("Done closed %v after the resume, want within %v", d, timerStep)
		}
		if !errors.Is(lease.Err(), ErrLeaseExpired) {
			t.Fatalf("lease ended with %v, want ErrLeaseExpired", lease.Err())
		}
	})
}

// oneRecordStore is a minimal in-memory Store for internal tests (memstore imports this package):
// owner records with compare-and-swap, and no queue.
type oneRecordStore struct {
	mu      sync.Mutex
	records map[string]Record
}

func (s *oneRecordStore) Load(_ context.Context, id string, _ bool) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[id]
	return r, ok, nil
}

func (s *oneRecordStore) CompareAndSwap(_ context.Context, id string, prev, next Record) (bool, Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records == nil {
		s.records = make(map[string]Record)
	}
	cur, ok := s.records[id]
	if (prev.Version == 0) == ok || cur.Version != prev.Version {
		return false, cur, ok, nil
	}
	s.records[id] = next
	return true, Record{}, false, nil
}

func (s *oneRecordStore) Enqueue(context.Context, string, QueueEntry, time.Duration) error {
	return nil
}
func (s *oneRecordStore) Dequeue(context.Context, string, QueueEntry) error { return nil }
func (s *oneRecordStore) Queue(context.Context, string, int64, int) ([]QueueEntry, error) {
	return nil, nil
}
