package lock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/testing/localhint"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// TestStoreLoadBudget counts store requests per client with the default options, in virtual time.
// Polling alone, the targets (docs/design.md, Targets) allow at most 1 request/s per held lock, 10/s
// for the queue head and 2/s for every other waiter. With hand-off hints the hints wake the waiters
// and polls are a safety net (docs/design.md, the poll schedule): the holder renews every lease/3
// (0.2/s), the head reads the owner record every second and the queue and its entry every 10 s
// (1.2/s), every other waiter reads the queue and rewrites its entry every 10 s (0.2/s); the test
// allows a quarter of a request more each at most (0.05 for the holder). Under a flood of forged
// hints (a thousand a second to every waiter, each naming a live queue entry) the hint budget
// keeps the load under 2/s for the head and 1/s for the others. These are the lock's own requests;
// a process also sends its driver's (docs/design.md, the poll schedule). Counting requests is
// exact here; latency numbers live in docs/benchmarks.md.
func TestStoreLoadBudget(t *testing.T) {
	for _, tc := range []struct {
		name          string
		hints, forged bool
		limits        []float64 // holder, head, waiters 2 to 4
	}{
		{name: "polls", limits: []float64{1, 10, 2, 2, 2}},
		{name: "hints", hints: true, limits: []float64{0.25, 1.45, 0.45, 0.45, 0.45}},
		{name: "forged-hints", hints: true, forged: true, limits: []float64{0.25, 2, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { storeLoad(t, tc.hints, tc.forged, tc.limits) })
		})
	}
}

func storeLoad(t *testing.T, hints, forged bool, limits []float64) {
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hinter := localhint.New()
	const n = 5 // holder, head, then three more waiters
	clients := make([]*memstore.Client, n)
	var wg sync.WaitGroup
	var holder *lock.Lease
	for i := range n {
		clients[i] = mem.Client(uint64(i+1), memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 3 * time.Millisecond})
		var opts []lock.Option
		if hints {
			opts = append(opts, lock.WithHinter(hinter))
		}
		l, err := lock.New(clients[i], lock.Owner{Identity: fmt.Sprintf("c%d", i), Incarnation: "1"}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if holder, err = l.Acquire(ctx, "load"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		time.Sleep(time.Second) // queue in a known order
		wg.Go(func() {
			if lease, err := l.Acquire(ctx, "load"); err == nil {
				_ = lease.Release(context.Background())
			}
		})
	}
	if forged {
		wg.Go(func() { forgeHints(ctx, mem.Client(99, memstore.Faults{}), hinter, "load") })
	}
	time.Sleep(10 * time.Second) // steady state
	before := make([]int, n)
	for i, c := range clients {
		before[i] = c.Requests()
	}
	const window = 60 * time.Second
	time.Sleep(window)
	roles := []string{"holder", "queue head", "waiter 2", "waiter 3", "waiter 4"}
	for i, c := range clients {
		rate := float64(c.Requests()-before[i]) / window.Seconds()
		t.Logf("%-10s %5.2f requests/s (budget %v)", roles[i], rate, limits[i])
		if rate > limits[i] {
			t.Errorf("%s made %.2f requests/s, budget %v", roles[i], rate, limits[i])
		}
		if i == 0 && !holder.Valid() {
			t.Fatalf("holder lost its lease: %v", holder.Err())
		}
	}
	if forged && hinter.Sent() == 0 {
		t.Fatal("no forged hint was sent")
	}
	cancel()
	wg.Wait()
	_ = holder.Release(context.Background())
}

// forgeHints sends, every millisecond until ctx ends, a hint of each kind to every live entry of
// lockID's queue: well-formed hints that say nothing true.
func forgeHints(ctx context.Context, store lock.Store, hinter lock.Hinter, lockID string) {
	var queue []lock.QueueEntry
	for i := 0; ctx.Err() == nil; i++ {
		if i%100 == 0 {
			queue, _ = store.Queue(ctx, lockID, 0, 100)
		}
		for _, e := range queue {
			for _, kind := range []lock.HintKind{lock.HintAhead, lock.HintFree} {
				hinter.Send(e.Hint, lock.Hint{LockID: lockID, Owner: e.Owner, Enqueued: e.Enqueued, Kind: kind})
			}
		}
		time.Sleep(time.Millisecond)
	}
}
