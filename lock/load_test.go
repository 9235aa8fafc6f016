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

// TestStoreLoadBudget counts store requests per client with the default options, in virtual time:
// The targets (docs/design.md) allow at most 1 request/s per held lock, 10/s for the queue head and
// 2/s for every other waiter. They hold with polling alone, with hand-off hints, and under a flood
// of forged hints (a thousand a second to every waiter, each naming a live queue entry), which
// the hint budget keeps from adding load. Counting requests is exact here; latency numbers live in
// docs/benchmarks.md.
func TestStoreLoadBudget(t *testing.T) {
	for _, tc := range []struct {
		name          string
		hints, forged bool
	}{
		{name: "polls"},
		{name: "hints", hints: true},
		{name: "forged-hints", hints: true, forged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { storeLoad(t, tc.hints, tc.forged) })
		})
	}
}

func storeLoad(t *testing.T, hints, forged bool) {
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
	limits := []float64{1, 10, 2, 2, 2}
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
