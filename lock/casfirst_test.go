package lock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// countingStore counts a Locker's store requests by kind.
type countingStore struct {
	lock.Store
	mu sync.Mutex
	n  map[string]int
}

func (s *countingStore) count(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[kind]++
}

func (s *countingStore) reset() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n
	s.n = map[string]int{}
	return n
}

func (s *countingStore) Load(ctx context.Context, lockID string, linearizable bool) (lock.Record, bool, error) {
	s.count("load")
	return s.Store.Load(ctx, lockID, linearizable)
}

func (s *countingStore) CompareAndSwap(ctx context.Context, lockID string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	s.count("cas")
	return s.Store.CompareAndSwap(ctx, lockID, prev, next)
}

func (s *countingStore) Queue(ctx context.Context, lockID string, from int64, limit int) ([]lock.QueueEntry, error) {
	s.count("queue")
	return s.Store.Queue(ctx, lockID, from, limit)
}

func (s *countingStore) Enqueue(ctx context.Context, lockID string, e lock.QueueEntry, ttl time.Duration) error {
	s.count("enqueue")
	return s.Store.Enqueue(ctx, lockID, e, ttl)
}

// TestCASFirstAfterOwnRelease: a Locker that acquires a lock again after its own release, with
// nobody queued, sends the grant at once together with the queue read: one conditional write and
// one queue read, no record read and no queue write. The first acquisition, which knows nothing
// of the lock, reads the record first.
func TestCASFirstAfterOwnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		store := &countingStore{Store: mem.Client(1, fastFaults), n: map[string]int{}}
		a, _ := lock.New(store, lock.Owner{Identity: "a", Incarnation: "1"}, lock.WithLease(3*time.Second))
		var tokens []int64
		for i := range 3 {
			l, err := a.Acquire(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			got := store.reset()
			want := map[string]int{"cas": 1, "queue": 1}
			if i == 0 {
				want["load"] = 1 // nothing known yet: read, then write
			}
			if len(got) != len(want) || got["cas"] != want["cas"] || got["queue"] != want["queue"] || got["load"] != want["load"] {
				t.Errorf("acquisition %d made %v store requests, want %v", i+1, got, want)
			}
			tokens = append(tokens, l.Token())
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			store.reset()
		}
		if tokens[1] != tokens[0]+1 || tokens[2] != tokens[1]+1 {
			t.Errorf("tokens %v, want one more per grant", tokens)
		}
	})
}

// TestNoCASFirstWhenOthersWait: when the release's queue read shows another owner waiting, the
// releaser's next acquisition does not start from the free record (the head is about to take
// it): it reads the record and the queue like any newcomer, and queues behind the waiter.
func TestNoCASFirstWhenOthersWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		store := &countingStore{Store: mem.Client(1, fastFaults), n: map[string]int{}}
		holder, _ := lock.New(store, lock.Owner{Identity: "holder", Incarnation: "1"}, lock.WithLease(3*time.Second))
		waiter, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "waiter", Incarnation: "1"}, lock.WithLease(3*time.Second))
		first, err := holder.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			l, err := waiter.Acquire(ctx, "x")
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(100 * time.Millisecond)
			_ = l.Release(ctx)
		}()
		defer func() { <-done }()
		waitQueued(t, mem, 1) // the waiter has queued
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		store.reset()
		again, err := holder.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		got := store.reset()
		_ = again.Release(ctx)
		if got["cas"] != 1 || got["load"] == 0 {
			t.Errorf("the next acquisition made %v store requests, want one conditional write (its grant, after the waiter's turn) after reading the record: "+
				"a CAS-first from the free record would have been given straight back", got)
		}
	})
}

// blindQueueStore reads an empty queue while blind is set: a queue read that just missed an entry.
type blindQueueStore struct {
	lock.Store
	blind atomic.Bool
}

func (s *blindQueueStore) Queue(ctx context.Context, lockID string, from int64, limit int) ([]lock.QueueEntry, error) {
	if s.blind.Load() {
		return nil, nil
	}
	return s.Store.Queue(ctx, lockID, from, limit)
}

// TestCASFirstGivesWayToTheQueue: the fairness guard. A waiter queues while the holder holds;
// the holder's release reads the queue without seeing it (the entry landed just after), so the
// holder, asking again at once, starts from its own free record. Its CAS-first grant applies
// before the waiter notices the release, but the queue read beside it shows the waiter, so the
// grant is given straight back and the waiter is granted first. Without the guard
// (WithoutFairnessGuard) the holder would take the lock back ahead of the queue, which the test
// checks too, so that it is known to be able to fail.
func TestCASFirstGivesWayToTheQueue(t *testing.T) {
	for _, guard := range []bool{true, false} {
		name := "guard"
		if !guard {
			name = "no-guard"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				ctx := context.Background()
				opts := []lock.Option{lock.WithLease(3 * time.Second)}
				if !guard {
					opts = append(opts, lock.WithoutFairnessGuard())
				}
				holderStore := &blindQueueStore{Store: mem.Client(1, fastFaults)}
				holder, _ := lock.New(holderStore, lock.Owner{Identity: "holder", Incarnation: "1"}, opts...)
				waiter, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "waiter", Incarnation: "1"}, lock.WithLease(3*time.Second))
				first, err := holder.Acquire(ctx, "x")
				if err != nil {
					t.Fatal(err)
				}
				waited, done := make(chan int64, 1), make(chan struct{})
				go func() {
					defer close(done)
					l, err := waiter.Acquire(ctx, "x")
					if err != nil {
						t.Error(err)
						waited <- 0
						return
					}
					waited <- l.Token()
					time.Sleep(100 * time.Millisecond) // hold a little, then hand over
					_ = l.Release(ctx)
				}()
				defer func() { <-done }()
				waitQueued(t, mem, 1) // the waiter has queued
				holderStore.blind.Store(true)
				if err := first.Release(ctx); err != nil {
					t.Fatal(err)
				}
				holderStore.blind.Store(false)
				again, err := holder.Acquire(ctx, "x")
				if err != nil {
					t.Fatal(err)
				}
				_ = again.Release(ctx)
				waiterToken := <-waited
				if guard && !(waiterToken > first.Token() && waiterToken < again.Token()) {
					t.Errorf("tokens: holder %d, then %d; waiter %d; want the waiter granted between the holder's two grants",
						first.Token(), again.Token(), waiterToken)
				}
				if !guard && !(again.Token() < waiterToken) {
					t.Errorf("without the guard the holder should have taken the lock back first: holder %d then %d, waiter %d",
						first.Token(), again.Token(), waiterToken)
				}
			})
		})
	}
}

// waitQueued waits (virtual time, at most a minute) until lock x's queue holds n entries.
func waitQueued(t *testing.T, mem *memstore.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if q, _ := mem.Client(3, memstore.Faults{}).Queue(context.Background(), "x", 0, 10); len(q) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock x's queue did not reach %d entries within a minute", n)
		}
	}
}
