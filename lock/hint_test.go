package lock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/testing/localhint"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// recordingHinter is a localhint.Hinter that remembers every hint sent through it.
type recordingHinter struct {
	*localhint.Hinter
	mu   sync.Mutex
	sent []lock.Hint
}

func (h *recordingHinter) Send(addr string, hint lock.Hint) {
	h.mu.Lock()
	h.sent = append(h.sent, hint)
	h.mu.Unlock()
	h.Hinter.Send(addr, hint)
}

func (h *recordingHinter) take() []lock.Hint {
	h.mu.Lock()
	defer h.mu.Unlock()
	sent := h.sent
	h.sent = nil
	return sent
}

// numberedLocker returns client i's Locker on mem: owner c<i>, its own memstore client with the
// 1–3 ms latency of fastFaults.
func numberedLocker(t *testing.T, mem *memstore.Store, i int, opts ...lock.Option) *lock.Locker {
	t.Helper()
	l, err := lock.New(mem.Client(uint64(i+1), fastFaults), lock.Owner{Identity: fmt.Sprintf("c%d", i), Incarnation: "1"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// handOffChain queues waiters behind a holder and releases the lock down the chain: each waiter
// releases as soon as it is granted. It returns how long each hand-off took, from the release to
// the next grant, in virtual time.
func handOffChain(t *testing.T, hinter lock.Hinter, waiters int, hold time.Duration) []time.Duration {
	mem := memstore.New()
	ctx := context.Background()
	opts := []lock.Option{lock.WithLease(5 * time.Second), lock.WithPollInterval(time.Second), lock.WithWaiterPollInterval(3 * time.Second)}
	if hinter != nil {
		opts = append(opts, lock.WithHinter(hinter))
	}
	newLocker := func(i int) *lock.Locker { return numberedLocker(t, mem, i, opts...) }
	holder, err := newLocker(0).Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	released := make([]time.Time, waiters+1)
	granted := make([]time.Time, waiters+1)
	var wg sync.WaitGroup
	for i := 1; i <= waiters; i++ {
		l := newLocker(i)
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "x")
			if err != nil {
				t.Error(err)
				return
			}
			granted[i] = time.Now()
			released[i] = time.Now()
			if err := lease.Release(ctx); err != nil {
				t.Error(err)
			}
		})
		waitQueued(t, mem, i)
	}
	time.Sleep(hold)
	released[0] = time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Waiters are granted in queue order, each after the one before released.
	order := make([]int, 0, waiters)
	for i := 1; i <= waiters; i++ {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int { return granted[a].Compare(granted[b]) })
	var took []time.Duration
	prev := 0
	for k, i := range order {
		if i != k+1 {
			t.Fatalf("grant %d went to waiter %d, want %d (queue order)", k+1, i, k+1)
		}
		took = append(took, granted[i].Sub(released[prev]))
		prev = i
	}
	return took
}

// TestHintHandsOverAtOnce: with hints, each waiter of a chain is granted within a few store round
// trips of the release before it, whether the holder held for long (its queue read was old: it
// reads the queue again beside its release) or not at all; with polling alone, a hand-off waits
// for the next poll.
func TestHintHandsOverAtOnce(t *testing.T) {
	for _, hold := range []time.Duration{0, 10 * time.Second} {
		t.Run(fmt.Sprintf("hold-%v", hold), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				for i, took := range handOffChain(t, localhint.New(), 4, hold) {
					if took > 50*time.Millisecond {
						t.Errorf("with hints, hand-off %d took %v; want under 50ms (a few round trips of 1-3 ms)", i+1, took)
					}
				}
			})
		})
	}
	t.Run("polls-only", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var slowest time.Duration
			for _, took := range handOffChain(t, nil, 4, 0) {
				slowest = max(slowest, took)
			}
			if slowest < 100*time.Millisecond {
				t.Errorf("without hints the slowest hand-off took %v: the hint test above could not fail", slowest)
			}
		})
	})
}

// TestHintsAreTargeted: a release tells the head of the queue alone that the lock is free, and
// the new holder, once it left the queue, tells the waiter behind it alone that it is the head
// now: two hints per hand-off, never one to every waiter.
func TestHintsAreTargeted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hinter := &recordingHinter{Hinter: localhint.New()}
		handOffChain(t, hinter, 4, 0)
		sent := hinter.take()
		var got []string
		for _, h := range sent {
			if h.Kind != lock.HintProbe { // probes check the hint path (hintprobe.go): no hand-off hint
				got = append(got, fmt.Sprintf("%s→%s", h.Kind, h.Owner))
			}
		}
		// Owner strings are "identity#incarnation" (see lock.Owner). c1 queued when the queue was
		// empty and, as the head, did not read it again before it was granted: it does not know
		// of c2. It would read the queue once after leaving it and tell c2, but each holder here
		// releases at once, before its entry is gone: the release reads the queue and tells c2.
		want := []string{
			"free→c1#1", "free→c2#1", "ahead→c3#1", "free→c3#1", "ahead→c4#1", "free→c4#1",
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("hints sent: %v\nwant:       %v", got, want)
		}
	})
}

// TestForgedFreeHintKeepsQueuePlace: a head told that the lock is free grants itself on the
// named record while its queue entry is removed; when the record was not free (a forged or stale
// hint), the grant does not apply, the entry comes back under its old name, and the queue order is
// unchanged: the head is still granted before the waiter behind it.
func TestForgedFreeHintKeepsQueuePlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		hinter := localhint.New()
		newLocker := func(i int) *lock.Locker {
			return numberedLocker(t, mem, i, lock.WithLease(5*time.Second), lock.WithHinter(hinter))
		}
		holder, err := newLocker(0).Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			order []string
			wg    sync.WaitGroup
		)
		for i := 1; i <= 2; i++ {
			l := newLocker(i)
			wg.Go(func() {
				lease, err := l.Acquire(ctx, "x")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, l.Owner().Identity)
				mu.Unlock()
				_ = lease.Release(ctx)
			})
			waitQueued(t, mem, i)
		}
		time.Sleep(3 * time.Second) // both have read the queue since: c1 knows it is the head
		queue, _ := mem.Client(9, memstore.Faults{}).Queue(ctx, "x", 0, 10)
		head := queue[0]
		rec, _ := mem.Record("x")
		// The record is held by c0: name a free record that never was.
		hinter.Send(head.Hint, lock.Hint{LockID: "x", Owner: head.Owner, Enqueued: head.Enqueued, Kind: lock.HintFree,
			Token: rec.Token, Version: rec.Version + 1})
		time.Sleep(time.Second)
		after, _ := mem.Client(9, memstore.Faults{}).Queue(ctx, "x", 0, 10)
		if len(after) != 2 || !after[0].Same(head) {
			t.Fatalf("queue after the forged hint: %v, want %v first again", after, head)
		}
		if got, _ := mem.Record("x"); got.Owner != rec.Owner || got.Token != rec.Token {
			t.Fatalf("record after the forged hint: %+v, want c0's grant unchanged", got)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if fmt.Sprint(order) != "[c1 c2]" {
			t.Fatalf("granted in order %v, want [c1 c2]", order)
		}
	})
}
