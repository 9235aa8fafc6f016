package lock_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// TestRemovalRespectsWriteTime: queue entries are plain writes reconciled by their writers'
// timestamps. A live waiter is cut off long enough to be judged dead by the waiter behind it, whose
// wall clock runs 30 s ahead of or behind the waiter's. The removal must carry the timestamp of the
// write it removes (issue 22, item 4): with a remover ahead, the waiter, back again, writes its
// entry again and is granted the free lock within two leases, not only once its own clock has
// passed the remover's; with a remover behind, the removal takes effect when it is made, not only
// when the entry's TTL runs out.
func TestRemovalRespectsWriteTime(t *testing.T) {
	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second} {
		t.Run("remover "+skew.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if problem := removalRespectsWriteTime(t, skew); problem != "" {
					t.Error(problem)
				}
			})
		})
		// The same with a remover that removes at its own clock: the test must see it.
		t.Run("mutant remover "+skew.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				problem := removalRespectsWriteTime(t, skew, lock.WithMutation("remove-at-own-clock"))
				if problem == "" {
					t.Error("a remover that removes entries at its own clock passed: the test cannot see the fault")
				}
				t.Logf("caught as expected: %s", problem)
			})
		})
	}
}

// removalRespectsWriteTime runs the scenario and returns what went wrong, "" when nothing did.
func removalRespectsWriteTime(t *testing.T, skew time.Duration, mutants ...lock.Option) (problem string) {
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const (
		lease = 3 * time.Second
		ttl   = 30 * time.Second // the waiter behind removes an entry unchanged for 12 s (TTL/3 + 2 polls)
		cut   = 16 * time.Second
	)
	opts := []lock.Option{lock.WithLease(lease), lock.WithQueueEntryTTL(ttl)}
	opts = append(opts, mutants...)
	holder, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "ns/holder/uid", Incarnation: "1"}, opts...)
	held, err := holder.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	waiterStore := mem.Client(2, fastFaults)
	waiter, _ := lock.New(waiterStore, lock.Owner{Identity: "ns/waiter/uid", Incarnation: "1"}, opts...)
	granted, done := grantTime(ctx, t, waiter, "x")
	waitQueued(t, mem, 1)

	if skew < 0 {
		time.Sleep(-skew + time.Second) // so that the remover, though behind, queues after the waiter
	}
	skewed := func() time.Time { return time.Now().Add(skew) }
	removerStore := mem.Client(3, fastFaults)
	removerStore.SetWallClock(skewed)
	remover, _ := lock.New(removerStore, lock.Owner{Identity: "ns/remover/uid", Incarnation: "1"},
		append(opts, lock.WithWallClock(skewed))...)
	rctx, stopRemover := context.WithCancel(ctx)
	_, removerDone := grantTime(rctx, t, remover, "x")
	waitQueued(t, mem, 2)

	// The waiter is cut off long enough for the remover to judge it dead and remove its entry.
	waiterStore.Partition(cut)
	cutAt := time.Now()
	for !queueIs(mem, "ns/remover/uid#1") && time.Since(cutAt) < time.Minute {
		time.Sleep(100 * time.Millisecond)
	}
	if took := time.Since(cutAt); took > 15*time.Second {
		problem = fmt.Sprintf("the cut-off waiter's entry was gone %v after the cut; want within 15 s (judged dead after 12 s), not at its TTL (%v); ", took, ttl)
	}
	stopRemover()
	<-removerDone
	time.Sleep(time.Until(cutAt.Add(cut + 2*time.Second))) // the partition heals; the waiter writes its entry again

	_ = held.Release(ctx)
	released := time.Now()
	select {
	case at, ok := <-granted:
		if !ok {
			t.Fatal("the waiter's acquisition failed")
		}
		if took := at.Sub(released); took > 2*lease {
			problem += fmt.Sprintf("the only waiter of the free lock was granted %v after the release; want within two leases (%v); "+
				"its rewrites were overruled %d times", took, 2*lease, waiterStore.OverruledWrites())
		}
	case <-time.After(time.Minute):
		problem += fmt.Sprintf("the only waiter of the free lock was not granted within a minute of the release; its rewrites were overruled %d times",
			waiterStore.OverruledWrites())
	}
	cancel()
	<-done
	return problem
}

// queueIs reports whether lock x's queue holds exactly the entries of the given owners, in order.
func queueIs(mem *memstore.Store, owners ...string) bool {
	q, err := mem.Client(99, memstore.Faults{}).Queue(context.Background(), "x", 0, 100)
	if err != nil || len(q) != len(owners) {
		return false
	}
	for i, e := range q {
		if e.Owner != owners[i] {
			return false
		}
	}
	return true
}
