package lock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// slowDequeueStore holds every Dequeue until the test lets it go.
type slowDequeueStore struct {
	lock.Store
	started chan struct{}
	release chan struct{}
}

func (s *slowDequeueStore) Dequeue(ctx context.Context, lockID string, e lock.QueueEntry) error {
	s.started <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Dequeue(ctx, lockID, e)
}

// TestDequeueIsOffTheCriticalPath: a waiter that is granted the lock returns from Acquire while
// the removal of its queue entry is still in flight (the grant is the owner record alone), and
// its lease gives the record back only after the entry is gone, so that the waiter it hands over
// to never finds it still ahead.
func TestDequeueIsOffTheCriticalPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		slow := &slowDequeueStore{Store: mem.Client(2, fastFaults), started: make(chan struct{}, 1), release: make(chan struct{})}
		holder, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "holder", Incarnation: "1"}, lock.WithLease(3*time.Second))
		waiter, _ := lock.New(slow, lock.Owner{Identity: "waiter", Incarnation: "1"}, lock.WithLease(3*time.Second))
		held, err := holder.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		granted := make(chan *lock.Lease, 1)
		go func() {
			l, err := waiter.Acquire(ctx, "x")
			if err != nil {
				t.Error(err)
			}
			granted <- l
		}()
		waitQueued(t, mem, 1) // the waiter has queued
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		<-slow.started // the waiter was granted and is removing its entry
		var l *lock.Lease
		select {
		case l = <-granted:
		case <-time.After(100 * time.Millisecond): // virtual; the request timeout is longer
			t.Fatal("Acquire waited for the removal of the queue entry")
		}
		if l == nil {
			t.FailNow()
		}
		released := make(chan error, 1)
		go func() { released <- l.Release(ctx) }()
		time.Sleep(200 * time.Millisecond) // virtual: far longer than any store latency here, shorter than the request timeout
		if rec, _ := mem.Record("x"); rec.Owner == "" {
			t.Fatal("the record was given back while the queue entry was still there")
		}
		close(slow.release)
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		if rec, _ := mem.Record("x"); rec.Owner != "" {
			t.Fatalf("record %+v after Release, want free", rec)
		}
		if q, _ := mem.Client(3, memstore.Faults{}).Queue(ctx, "x", 0, 10); len(q) != 0 {
			t.Fatalf("queue %v after Release, want empty", q)
		}
	})
}
