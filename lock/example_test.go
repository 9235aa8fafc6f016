package lock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// Acquire a lock, do fenced work while it is held, and release it. Production code uses
// cassandrastore.New instead of the in-memory store.
func Example() {
	ctx := context.Background()
	store := memstore.New().Client(1, memstore.Faults{})
	owner := lock.Owner{Identity: "shop/orders-worker-0/uid-1", Incarnation: "a"}
	locker, err := lock.New(store, owner, lock.WithLease(15*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := locker.Acquire(ctx, "shop/orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)

	work, cancel := lease.Context(ctx) // cancelled the moment the lease is lost
	defer cancel()
	_ = work
	// Send lease.Token() with every write to the protected resource, which must reject tokens
	// lower than the highest it has seen. The first token of a new lock is its creation time in
	// microseconds; every later grant adds one.
	fmt.Println("holding", lease.LockID(), "valid:", lease.Valid(), "token > 0:", lease.Token() > 0)
	// Output: holding shop/orders valid: true token > 0: true
}
