package cassandrastore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

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

// TestTrioNodeDown kills one node of three (quorum stays) and checks two locks through one
// outage, so that the cluster pays for one node restart: a lock that is held keeps renewing,
// others stay out and a release still hands over (WhileHolding); contenders of another lock keep
// taking turns, never overlapping, while the node is down and after it is back (WhileContending).
func TestTrioNodeDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	contended := lockID(t) + "-contended"
	var log grantLog
	var phase atomic.Int32 // 0 before the kill, 1 while the node is down, 2 after it is back
	var during atomic.Int32
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 4 {
		l := newLocker(t, trioStore(t), fmt.Sprintf("c%d", i))
		wg.Go(func() {
			for ctx.Err() == nil {
				lease, err := l.Acquire(ctx, contended)
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

	held := lockID(t) + "-held"
	holder, err := newLocker(t, trioStore(t), "holder").Acquire(ctxFor(t, time.Minute), held)
	if err != nil {
		t.Fatal(err)
	}
	// The longest request timeout the lease allows (the renew interval): on a loaded machine a
	// serial read of a fresh session right after a node died took longer than the default half of
	// it twenty times in a row.
	other := newLocker(t, trioStore(t), "other", lock.WithRequestTimeout(testLease/3))
	time.Sleep(3 * time.Second) // the contenders take turns with every node up
	restart := killNode(t, 2)
	downSince := time.Now()
	phase.Store(1)

	var next *lock.Lease // the held lock's second holder, granted while the node was down
	holdCtx := ctxFor(t, 3*time.Minute)
	t.Run("WhileHolding", func(t *testing.T) {
		next = holdThroughNodeDown(t, holdCtx, holder, other, held)
	})
	// The node stays down for at least three leases, and until a few grants of the contended lock
	// happened without it (on a busy machine the drivers take a while to stop routing to the dead
	// node), up to a minute: liveness with one node of three down is what this test is for.
	for time.Since(downSince) < 3*testLease || (during.Load() < 3 && time.Since(downSince) < time.Minute) {
		time.Sleep(100 * time.Millisecond)
	}
	phase.Store(2)
	restart()
	if next != nil {
		// Still held and renewing after the node came back.
		if !next.Valid() {
			t.Errorf("WhileHolding: lease lost while the node restarted: %v", next.Err())
		}
		release(t, next)
	}
	time.Sleep(3 * time.Second) // the contenders take turns with the node back
	cancel()
	wg.Wait()
	t.Run("WhileContending", func(t *testing.T) {
		log.check(t)
		t.Logf("%d grants in all, %d while a node was down", len(log.holds), during.Load())
		if during.Load() == 0 {
			t.Fatal("no grant while one of three nodes was down: the lock was not live")
		}
	})
}

// holdThroughNodeDown checks, with one node of three down, that holder keeps lock id for two
// leases, that other's tries fail with ErrLocked (never succeed), and that a release hands the lock
// to other with the next token, which it returns.
func holdThroughNodeDown(t *testing.T, ctx context.Context, holder *lock.Lease, other *lock.Locker, id string) *lock.Lease {
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
	return l
}

// productStore returns a store on a session configured as the sidecar, the operator and the CLI
// configure theirs (Connection.ClusterConfig), on the three-node cluster.
func productStore(t *testing.T) *cassandrastore.Store {
	t.Helper()
	return observedProductStore(t, nil)
}

// observedProductStore is productStore whose session also tells observe of every request, after
// the session's own observer (the slow-host policy) saw it.
func observedProductStore(t *testing.T, observe func(gocql.ObservedQuery)) *cassandrastore.Store {
	t.Helper()
	trioStore(t) // the schema
	cc, err := cassandrastore.Connection{ContactPoints: trio.Cluster(t).Hosts(), Keyspace: keyspace}.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if inner := cc.QueryObserver; observe != nil {
		cc.QueryObserver = observerFunc(func(ctx context.Context, q gocql.ObservedQuery) {
			inner.ObserveQuery(ctx, q)
			observe(q)
		})
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

// observerFunc is a gocql.QueryObserver.
type observerFunc func(context.Context, gocql.ObservedQuery)

func (f observerFunc) ObserveQuery(ctx context.Context, q gocql.ObservedQuery) { f(ctx, q) }

// coordinators records which host coordinated each request of a session, and when.
type coordinators struct {
	mu   sync.Mutex
	seen []coordinated
}

type coordinated struct {
	host       string // IP address
	start, end time.Time
	stmt       string // its first word, "LWT" for a lightweight transaction
	cons       gocql.Consistency
	err        error
}

func (c *coordinators) observe(q gocql.ObservedQuery) {
	if q.Host == nil {
		return
	}
	stmt, _, _ := strings.Cut(strings.TrimSpace(q.Statement), " ")
	cons := gocql.Any
	if q.Query != nil {
		cons = q.Query.GetConsistency()
		if strings.Contains(q.Statement, " IF ") {
			stmt = "LWT"
			cons, _ = q.Query.GetSerialConsistency()
		}
	}
	c.mu.Lock()
	c.seen = append(c.seen, coordinated{q.Host.ConnectAddress().String(), q.Start, q.End, stmt, cons, q.Err})
	c.mu.Unlock()
}

// report logs every request sent at or after since: when, to whom, how long it took.
func (c *coordinators) report(t *testing.T, since time.Time) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, s := range c.seen {
		if s.start.Before(since) {
			continue
		}
		fmt.Fprintf(&b, "\n  +%6.3fs %-9s %-7s %-6s took %4dms", s.start.Sub(since).Seconds(), s.host, s.stmt, s.cons,
			s.end.Sub(s.start).Milliseconds())
		if s.err != nil {
			fmt.Fprintf(&b, " %v", s.err)
		}
	}
	t.Logf("the holder's session's requests since %s:%s", since.Format("15:04:05.000"), b.String())
}

// last returns the host of the request observed last.
func (c *coordinators) last() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) == 0 {
		return ""
	}
	return c.seen[len(c.seen)-1].host
}

// firstSince returns when the first request sent to host at or after since was sent.
func (c *coordinators) firstSince(host string, since time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.seen {
		if s.host == host && !s.start.Before(since) {
			return s.start, true
		}
	}
	return time.Time{}, false
}

// primaryReplica returns a new lock ID whose partition's first replica, the coordinator the
// driver's plan starts with, is node i: the coordinator store's session chose for a first read.
func primaryReplica(t *testing.T, ctx context.Context, store *cassandrastore.Store, c *coordinators, i int) string {
	t.Helper()
	want := nodeIP(t, i)
	for n := 0; n < 100; n++ {
		id := fmt.Sprintf("%s-%d-%d", t.Name(), time.Now().UnixNano(), n)
		if _, _, err := store.Load(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		if c.last() == want {
			return id
		}
	}
	t.Fatalf("no lock ID with node %d as its first replica in 100 tries", i)
	return ""
}

// nodeIP returns node i's IP address.
func nodeIP(t *testing.T, i int) string {
	t.Helper()
	ip, _, _ := net.SplitHostPort(trio.Cluster(t).NodeHost(i))
	return ip
}

// TestTrioHungNodeAfterRestart (issue 22, item 9) replays, at the test lease, what cost an outside
// chaos run both locks of a sidecar while quorum held. A node restarts; at once quorum is lost for
// a lease and a half while the sidecar asks for its lock, and comes back; the sidecar takes the
// lock and, through the same session, waits for a second one; then the lock's first replica, the
// first contact point, hangs. The holder must keep its lock through four leases of the hang.
//
// What it took before the fix: the session marked every coordinator it tried during the quorum
// loss, and only the first replica answered again before the hang. The restarted node was not
// used for 10 s (the driver's node-up delay). Once the first replica hung and was marked too,
// every host left was marked, and in the driver's plan order (first replica first) every renewal
// went to the hung node. Reads of the second lock, which a live coordinator sent to the hung
// replica, marked that coordinator again. The lease expired 2-4 s into the hang. The test also
// checks that the session sends requests to the restarted node again within 5 s of it being up
// (cassandrastore.ReconnectInterval; the driver's own node-up delay is 10 s).
func TestTrioHungNodeAfterRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var coord coordinators
	store := observedProductStore(t, coord.observe)
	const hung, restarted, third = 0, 1, 2
	id := primaryReplica(t, ctx, store, &coord, hung)
	probe := primaryReplica(t, ctx, store, &coord, restarted)
	holder := newLocker(t, store, "holder")
	second := newLocker(t, store, "holder-second") // the sidecar's second lock: same session
	other := newLocker(t, productStore(t), "other")

	start := time.Now()
	elapsed := func() time.Duration { return time.Since(start).Round(time.Millisecond) }
	restart := killNode(t, restarted)
	time.Sleep(time.Second) // every session has seen it die
	restart()
	up := time.Now()
	t.Logf("%v: node %d restarted", elapsed(), restarted)
	const backWithin = 5 * time.Second
	restartedIP := nodeIP(t, restarted)
	wg.Go(func() { // reads whose plan starts with the restarted node, as long as the check below looks
		for time.Since(up) < backWithin && ctx.Err() == nil {
			if _, ok := coord.firstSince(restartedIP, up); ok {
				return
			}
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, _, _ = store.Load(rctx, probe, false)
			cancel()
			time.Sleep(50 * time.Millisecond)
		}
	})
	defer func() {
		at, ok := coord.firstSince(restartedIP, up)
		switch {
		case !ok:
			t.Errorf("the session sent the restarted node nothing in the %v after it was up", time.Since(up).Round(10*time.Millisecond))
		case at.Sub(up) > backWithin:
			t.Errorf("the session sent the restarted node nothing for %v after it was up (want at most %v)", at.Sub(up).Round(10*time.Millisecond), backWithin)
		default:
			t.Logf("the session used the restarted node again %v after it was up", at.Sub(up).Round(10*time.Millisecond))
		}
	}()

	resumeHung, resumeThird := hangNode(t, hung), hangNode(t, third)
	acquired := make(chan *lock.Lease, 1)
	wg.Go(func() {
		l, err := holder.Acquire(ctx, id)
		if err != nil && ctx.Err() == nil {
			t.Errorf("holder: %v", err)
		}
		acquired <- l
	})
	time.Sleep(testLease * 3 / 2)
	resumeHung()
	resumeThird()
	t.Logf("%v: quorum back", elapsed())
	var lease *lock.Lease
	select {
	case lease = <-acquired:
	case <-time.After(3 * testLease):
		t.Fatalf("the holder was not granted within %v of quorum coming back", 3*testLease)
	}
	if lease == nil {
		t.FailNow()
	}
	defer release(t, lease)
	t.Logf("%v: the holder has its lock", elapsed())
	otherID := id + "-second"
	held, err := other.Acquire(ctx, otherID)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, held)
	wg.Go(func() {
		if l, err := second.Acquire(ctx, otherID); err == nil {
			release(t, l)
		}
	})

	resume := hangNode(t, hung)
	hungAt := time.Now()
	t.Logf("%v: node %d hung", elapsed(), hung)
	defer resume()
	select {
	case <-lease.Done():
		coord.report(t, hungAt.Add(-testLease))
		t.Fatalf("the holder lost its lock %v into the hang of node %d, right after node %d restarted, with quorum: %v",
			time.Since(hungAt).Round(time.Millisecond), hung, restarted, lease.Err())
	case <-time.After(4 * testLease):
	}
	resume()
	t.Logf("%v: held through %v of the hang", elapsed(), 4*testLease)
}
