package lock_test

import (
	"context"
	"errors"
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

// fencedStore is a resource protected by fencing tokens: it rejects a write with a token lower than
// the highest it has accepted.
type fencedStore struct {
	fence int64
	value string
}

var errStaleToken = errors.New("stale fencing token")

func (r *fencedStore) write(token int64, value string) error {
	if token < r.fence {
		return errStaleToken
	}
	r.fence, r.value = token, value
	return nil
}

// Do fenced work: Fenced hands the work the lease's token and a context that ends with the lease,
// and the resource rejects writes of any holder older than the newest it has seen.
func ExampleLease_Fenced() {
	ctx := context.Background()
	mem := memstore.New()
	resource := &fencedStore{}

	first, _ := lock.New(mem.Client(1, memstore.Faults{}), lock.Owner{Identity: "shop/worker-0/uid-1", Incarnation: "a"})
	old, _ := first.Acquire(ctx, "shop/orders")
	_ = old.Release(ctx)

	second, _ := lock.New(mem.Client(2, memstore.Faults{}), lock.Owner{Identity: "shop/worker-1/uid-2", Incarnation: "b"})
	lease, _ := second.Acquire(ctx, "shop/orders")
	defer lease.Release(ctx)
	err := lease.Fenced(ctx, func(ctx context.Context, token int64) error {
		return resource.write(token, "written by the holder")
	})
	fmt.Println("holder:", err)

	// A stale holder (here: the first grant's token, as a process paused past its lease would
	// still have it) is rejected by the resource, not by the lock.
	fmt.Println("stale holder:", resource.write(old.Token(), "written late"))
	fmt.Println("an ended lease does not run the work:", errors.Is(old.Fenced(ctx, func(context.Context, int64) error { return nil }), lock.ErrReleased))
	fmt.Println("value:", resource.value)
	// Output:
	// holder: <nil>
	// stale holder: stale fencing token
	// an ended lease does not run the work: true
	// value: written by the holder
}
