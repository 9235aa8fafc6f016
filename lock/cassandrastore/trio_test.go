package cassandrastore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

const rf3 = "{'class': 'SimpleStrategy', 'replication_factor': 3}"

// trioStore returns a store on the three-node cluster (RF 3, QUORUM/SERIAL).
func trioStore(t *testing.T) *cassandrastore.Store {
	t.Helper()
	return newStore(t, trio, rf3)
}

// restartAfter registers a cleanup that brings node i back if the test killed it.
func killNode(t *testing.T, i int) (restart func()) {
	t.Helper()
	cl := trio.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.KillNode(ctx, i); err != nil {
		t.Fatalf("killing node %d: %v", i, err)
	}
	t.Logf("killed node %d (%s)", i, cl.NodeHost(i))
	var once sync.Once
	restart = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			start := time.Now()
			if err := cl.StartNode(ctx, i); err != nil {
				t.Fatalf("restarting node %d: %v", i, err)
			}
			t.Logf("node %d back after %v", i, time.Since(start).Round(time.Second))
		})
	}
	t.Cleanup(restart)
	return restart
}

// TestTrioNodeDownWhileHolding: with one of three replicas dead the holder keeps renewing, others
// stay out, and a release still hands over.
func TestTrioNodeDownWhileHolding(t *testing.T) {
	store := trioStore(t)
	id := lockID(t)
	ctx := ctxFor(t, 3*time.Minute)
	holder, err := newLocker(t, store, "holder").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The longest request timeout the lease allows (the renew interval): on a loaded machine a
	// serial read of a fresh session right after a node died took longer than the default half of
	// it twenty times in a row.
	other := newLocker(t, trioStore(t), "other", lock.WithRequestTimeout(testLease/3))
	restart := killNode(t, 2)

	select {
	case <-holder.Done():
		t.Fatalf("holder lost the lock with one node down: %v", holder.Err())
	case <-time.After(2 * testLease):
	}
	// A single try may also fail with a store error while the driver learns the node is gone;
	// it must never succeed.
	var tryErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		var l *lock.Lease
		if l, tryErr = other.TryAcquire(ctx, id); l != nil {
			t.Fatalf("try while held succeeded with token %d", l.Token())
		}
		if errors.Is(tryErr, lock.ErrLocked) {
			break
		}
		t.Logf("try while held: %v", tryErr)
		time.Sleep(250 * time.Millisecond)
	}
	if !errors.Is(tryErr, lock.ErrLocked) {
		t.Fatalf("try while held: %v, want ErrLocked", tryErr)
	}
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := other.Acquire(ctx, id)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	release(t, holder)
	l := <-got
	if l == nil || l.Token() != holder.Token()+1 {
		t.Fatal("the waiter should be granted the next token with one node down")
	}
	restart()
	// Still held and renewing after the node came back.
	if !l.Valid() {
		t.Fatalf("lease lost while the node restarted: %v", l.Err())
	}
	release(t, l)
}

// TestTrioNodeDownWhileContending: contenders keep taking turns, never overlapping, while a node
// dies and comes back.
func TestTrioNodeDownWhileContending(t *testing.T) {
	id := lockID(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log grantLog
	var phase atomic.Int32 // 0 before the kill, 1 while the node is down, 2 after it is back
	var during atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 {
		l := newLocker(t, trioStore(t), fmt.Sprintf("c%d", i))
		wg.Go(func() {
			for ctx.Err() == nil {
				lease, err := l.Acquire(ctx, id)
				if err != nil {
					if ctx.Err() == nil {
						t.Logf("contender %d: %v", i, err)
					}
					continue
				}
				start := time.Now()
				time.Sleep(20 * time.Millisecond)
				if !lease.Valid() {
					t.Errorf("contender %d lost its lease while holding: %v", i, lease.Err())
				}
				log.add(hold{who: l.Owner().String(), token: lease.Token(), start: start, end: time.Now()})
				if phase.Load() == 1 {
					during.Add(1)
				}
				release(t, lease)
			}
		})
	}
	time.Sleep(3 * time.Second)
	restart := killNode(t, 1)
	phase.Store(1)
	// The node stays down for at least three leases, and until a few grants happened without it
	// (on a busy machine the drivers take a while to stop routing to the dead node), up to a
	// minute: liveness with one node of three down is what this test is for.
	downSince := time.Now()
	for time.Since(downSince) < 3*testLease || (during.Load() < 3 && time.Since(downSince) < time.Minute) {
		time.Sleep(100 * time.Millisecond)
	}
	phase.Store(2)
	restart()
	time.Sleep(3 * time.Second)
	cancel()
	wg.Wait()
	log.check(t)
	t.Logf("%d grants in all, %d while a node was down", len(log.holds), during.Load())
	if during.Load() == 0 {
		t.Fatal("no grant while one of three nodes was down: the lock was not live")
	}
}

// productStore returns a store on a session configured as the sidecar, the operator and the CLI
// configure theirs (Connection.ClusterConfig), on the three-node cluster.
func productStore(t *testing.T) *cassandrastore.Store {
	t.Helper()
	trioStore(t) // the schema
	cc, err := cassandrastore.Connection{ContactPoints: trio.Cluster(t).Hosts(), Keyspace: keyspace}.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	session, err := cc.CreateSession()
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { cassandrastore.CloseSession(session, 10*time.Second) })
	store, err := cassandrastore.New(ctxFor(t, time.Minute), session, cassandrastore.WithKeyspace(keyspace))
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// hangNode stops node i (SIGSTOP: its connections stay open and requests to it simply get no
// answer, as in a long GC pause or a disk stall) until the returned function or the test's end.
func hangNode(t *testing.T, i int) (resume func()) {
	t.Helper()
	cl := trio.Cluster(t)
	pid := cl.NodePID(i)
	if pid <= 0 {
		t.Fatalf("node %d is not running", i)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping node %d: %v", i, err)
	}
	t.Logf("hung node %d (%s, pid %d)", i, cl.NodeHost(i), pid)
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("resuming node %d: %v", i, err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// TestTrioHungNodeWhileHolding: one of three nodes hangs (quorum is still there). The holder must
// keep its lease through five leases of the hang, and a release must still hand over within three
// leases while the node still hangs: a hung coordinator may cost one request, not the lock (issue
// 12: an external run lost held locks 3-13 s into such a hang, and hand-offs stalled until the node
// resumed). Alone the hand-off takes tens of milliseconds; under make test's load on two cores it
// took 4.8 s once and more than two leases (6 s) twice.
func TestTrioHungNodeWhileHolding(t *testing.T) {
	id := lockID(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	holder, err := newLocker(t, productStore(t), "holder").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newLocker(t, productStore(t), "waiter")
	granted := make(chan *lock.Lease, 1)
	wg.Go(func() {
		l, err := waiter.Acquire(ctx, id)
		if err != nil && ctx.Err() == nil {
			t.Errorf("waiter: %v", err)
		}
		granted <- l
	})
	resume := hangNode(t, 2)
	hungAt := time.Now()
	select {
	case <-holder.Done():
		t.Fatalf("the holder lost the lock %v into the hang of one node of three: %v", time.Since(hungAt).Round(time.Millisecond), holder.Err())
	case l := <-granted:
		t.Fatalf("the waiter was granted token %d while the holder held", l.Token())
	case <-time.After(5 * testLease):
	}
	released := time.Now()
	release(t, holder)
	select {
	case l := <-granted:
		t.Logf("handed over %v after the release, the node still hung", time.Since(released).Round(time.Millisecond))
		if l != nil {
			release(t, l)
		}
	case <-time.After(3 * testLease):
		t.Errorf("no hand-off within %v of the release while one node of three hangs", 3*testLease)
	}
	resume()
}
