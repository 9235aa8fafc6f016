package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// TestObservationDoesNotOutliveItsRecord: a waiter's observation of the owner record must never
// make it take over a different record. The record is deleted behind the lock's back and created
// again by a live holder whose wall clock is behind, so the new record's tokens are lower than the
// old one's and it looks older. The waiter that watched the old record must not take the live
// holder's grant over: it observes the new record for a full lease like any other (issue 22,
// item 2).
func TestObservationDoesNotOutliveItsRecord(t *testing.T) {
	t.Run("lock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			if problem := observationOutlivesRecord(t); problem != "" {
				t.Error(problem)
			}
		})
	})
	// A waiter whose observation licenses a grant on any record: the test must see it.
	t.Run("mutant", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			problem := observationOutlivesRecord(t, lock.WithMutation("stale-observation"))
			if problem == "" {
				t.Error("a waiter that takes over a re-created record on an old observation passed: the test cannot see the fault")
			}
			t.Logf("caught as expected: %s", problem)
		})
	})
}

// observationOutlivesRecord runs the scenario with the waiter's extra options and returns what
// went wrong, "" when nothing did.
func observationOutlivesRecord(t *testing.T, waiterOpts ...lock.Option) (problem string) {
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lease = 3 * time.Second
	first, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "ns/first/uid", Incarnation: "1"}, lock.WithLease(lease))
	held, err := first.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "ns/waiter/uid", Incarnation: "1"},
		append([]lock.Option{lock.WithLease(lease)}, waiterOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	granted, done := grantTime(ctx, t, waiter, "x")
	var live *lock.Lease
	defer func() {
		cancel()
		<-done
		_ = held.Release(context.Background())
		if live != nil {
			_ = live.Release(context.Background())
		}
		time.Sleep(2 * lease) // let background removals and renewals end
	}()
	waitQueued(t, mem, 1)
	time.Sleep(2 * lease) // the waiter is the head and watches the first holder's renewals

	// The record is deleted and created again by a holder whose wall clock is an hour behind.
	mem.Delete("x")
	behind := func() time.Time { return time.Now().Add(-time.Hour) }
	second, _ := lock.New(mem.Client(3, fastFaults), lock.Owner{Identity: "ns/second/uid", Incarnation: "1"},
		lock.WithLease(lease), lock.WithWallClock(behind))
	live, err = second.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatalf("creating the record again: %v", err)
	}
	if live.Token() >= held.Token() {
		t.Fatalf("the re-created record's token %d is not below the old one's %d: the test needs a lower one", live.Token(), held.Token())
	}
	deleted := time.Now()
	select {
	case at := <-granted:
		return fmt.Sprintf("the waiter was granted %v after the record was re-created, while its live holder (token %d) is valid: %v; "+
			"an observation of the deleted record (token %d) let it take over a different one",
			at.Sub(deleted), live.Token(), live.Valid(), held.Token())
	case <-time.After(3 * lease):
	}
	if !live.Valid() {
		return fmt.Sprintf("the live holder lost its lease: %v", live.Err())
	}
	// Once the live holder releases, the waiter is granted.
	_ = live.Release(ctx)
	released := time.Now()
	select {
	case at := <-granted:
		if took := at.Sub(released); took > lease {
			return fmt.Sprintf("the waiter was granted %v after the release; want within a lease", took)
		}
	case <-time.After(5 * lease):
		return "the waiter was not granted within 5 leases of the release"
	}
	return ""
}

// TestTryAcquireFarApartTakesOverADeadHolder: a TryAcquire caller that asks far apart (every 10
// s, lease 3 s) takes a dead holder's lock over at its second call: the record read is the very
// same write both times, so it was unchanged all along, however long ago the first read was.
func TestTryAcquireFarApartTakesOverADeadHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		const lease = 3 * time.Second
		dying := mem.Client(1, fastFaults)
		holder, _ := lock.New(dying, lock.Owner{Identity: "ns/holder/uid", Incarnation: "1"}, lock.WithLease(lease))
		if _, err := holder.Acquire(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		dying.Crash() // the holder's process dies without releasing
		defer time.Sleep(2 * lease)
		try, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "ns/cron/uid", Incarnation: "1"}, lock.WithLease(lease))
		start := time.Now()
		for call := 1; call <= 3; call++ {
			l, err := try.TryAcquire(ctx, "x")
			if err == nil {
				t.Logf("granted at call %d, %v after the first", call, time.Since(start))
				_ = l.Release(ctx)
				if call > 2 {
					t.Errorf("granted only at call %d; want the second (a lease had passed since the first)", call)
				}
				return
			}
			if !errors.Is(err, lock.ErrLocked) {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Second)
		}
		t.Fatal("a TryAcquire every 10 s never took over the dead holder's lock (lease 3 s)")
	})
}
