package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/suspendclock"
)

// fakeSuspension is a suspendedFor whose total the test sets.
type fakeSuspension struct{ total atomic.Int64 }

func (f *fakeSuspension) read() time.Duration     { return time.Duration(f.total.Load()) }
func (f *fakeSuspension) suspend(d time.Duration) { f.total.Add(int64(d)) }

// TestDefaultClockCountsSuspension: a Locker's default lease clock counts the time the machine
// spent suspended (package suspendclock tests the clock itself).
func TestDefaultClockCountsSuspension(t *testing.T) {
	l, err := New(&oneRecordStore{}, Owner{Identity: "a", Incarnation: "1"})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := l.opts.clock.(*suspendclock.Clock)
	if !ok {
		t.Fatalf("default lease clock is %T, want the suspend-counting clock", l.opts.clock)
	}
	if !c.CountsSuspension() {
		t.Skip("no suspend-counting clock on this system")
	}
}

// TestLeaseCountsSuspension: a holder whose machine was suspended past its lease finds its lease
// invalid at once on resume and lost within one timer step.
func TestLeaseCountsSuspension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSuspension
		l, err := New(&oneRecordStore{}, Owner{Identity: "a", Incarnation: "1"}, WithLease(15*time.Second),
			WithClock(suspendclock.Counting(s.read)))
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
		if d := time.Since(resumed); d > suspendclock.TimerStep {
			t.Fatalf("Done closed %v after the resume, want within %v", d, suspendclock.TimerStep)
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
