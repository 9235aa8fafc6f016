package lock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// TestStoreLoadBudget counts store requests per client with the default options, in virtual time:
// The targets (docs/design.md) allow at most 1 request/s per held lock, 10/s for the queue head and 2/s for every
// other waiter. Counting requests is exact here; latency numbers live in docs/benchmarks.md.
func TestStoreLoadBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const n = 5 // holder, head, then three more waiters
		clients := make([]*memstore.Client, n)
		var wg sync.WaitGroup
		var holder *lock.Lease
		for i := range n {
			clients[i] = mem.Client(uint64(i+1), memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 3 * time.Millisecond})
			l, err := lock.New(clients[i], lock.Owner{Identity: fmt.Sprintf("c%d", i), Incarnation: "1"})
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
		cancel()
		wg.Wait()
		_ = holder.Release(context.Background())
	})
}
