package lock_test

// Tests for the paths around the core protocol where two live processes could hold one lock or a
// lock could be stuck for a lease (issue 8). Each runs the real Locker on the in-memory store in
// virtual time.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/internal/testing/testclock"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

var fastFaults = memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 3 * time.Millisecond}

// testRestartSecret is the restart secret of the tests' zero-wait processes: every restart of one
// identity knows it, as every container of one pod can read the pod's emptyDir.
var testRestartSecret = []byte("edges-test-restart-secret")

// TestSameIdentityWithoutZeroWaitWaits: two live processes that share an identity (two CLI
// processes with the same hostname and PID in two containers) are two owners. Without
// WithZeroWaitRestart the second must wait for the first like anybody else.
func TestSameIdentityWithoutZeroWaitWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		first, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "host/worker/1", Incarnation: "a"}, lock.WithLease(3*time.Second))
		second, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "host/worker/1", Incarnation: "b"}, lock.WithLease(3*time.Second))
		held, err := first.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if l, err := second.Acquire(wctx, "x"); err == nil {
			defer l.Release(ctx)
			t.Fatalf("second process with the same identity was granted token %d %v after asking while the first (token %d) is valid: %v",
				l.Token(), time.Since(start), held.Token(), held.Valid())
		}
		if l, err := second.TryAcquire(ctx, "x"); !errors.Is(err, lock.ErrLocked) {
			if l != nil {
				defer l.Release(ctx)
			}
			t.Fatalf("TryAcquire by a second process with the same identity: %v, want ErrLocked", err)
		}
		if !held.Valid() {
			t.Fatal("first holder lost its lease")
		}
		_ = held.Release(ctx)
		l, err := second.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	})
}

// TestZeroWaitRestartAheadOfQueue: with WithZeroWaitRestart, a restarted process of the holder's
// identity takes over its predecessor's grant at once even when standbys are queued (the normal
// leader-election shape), with a new token; leadership does not move.
func TestZeroWaitRestartAheadOfQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		opts := []lock.Option{lock.WithLease(3 * time.Second), lock.WithZeroWaitRestart(testRestartSecret)}
		crashing := mem.Client(1, fastFaults)
		leader, _ := lock.New(crashing, lock.Owner{Identity: "ns/leader/uid-1", Incarnation: "1"}, opts...)
		lease, err := leader.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		// Two standbys queue behind the leader.
		var granted sync.Map
		var wg sync.WaitGroup
		for i := range 2 {
			s, _ := lock.New(mem.Client(uint64(10+i), fastFaults), lock.Owner{Identity: fmt.Sprintf("ns/standby-%d/uid", i), Incarnation: "1"}, opts...)
			wg.Go(func() {
				if l, err := s.Acquire(ctx, "x"); err == nil {
					granted.Store(i, l.Token())
					<-ctx.Done()
					_ = l.Release(context.Background())
				}
			})
		}
		time.Sleep(2 * time.Second)
		if q, _ := mem.Client(99, memstore.Faults{}).Queue(ctx, "x", 0, 10); len(q) != 2 {
			t.Fatalf("queue %v, want the two standbys", q)
		}
		// The leader's process dies without releasing; its pod's sidecar restarts at once.
		crashing.Crash()
		restarted, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "ns/leader/uid-1", Incarnation: "2"}, opts...)
		start := time.Now()
		defer func() {
			cancel()
			wg.Wait()
			time.Sleep(10 * time.Second) // let the crashed lease's goroutines give up
		}()
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		defer acancel()
		again, err := restarted.Acquire(actx, "x")
		if err != nil {
			t.Fatal(err)
		}
		defer again.Release(context.Background())
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Fatalf("restarted leader granted after %v with standbys queued; want at once (zero-wait restart)", took)
		}
		if again.Token() <= lease.Token() {
			t.Fatalf("restart got token %d after %d", again.Token(), lease.Token())
		}
		granted.Range(func(k, v any) bool {
			t.Errorf("standby %v was granted token %v", k, v)
			return true
		})
	})
}

// TestZeroWaitNeverTakesRevokedGrant: a revoked grant of our own identity is not taken over at
// once: the revocation would be undone by a restart.
func TestZeroWaitNeverTakesRevokedGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		opts := []lock.Option{lock.WithLease(3 * time.Second), lock.WithZeroWaitRestart(testRestartSecret)}
		crashing := mem.Client(1, fastFaults)
		first, _ := lock.New(crashing, lock.Owner{Identity: "ns/p/uid", Incarnation: "1"}, opts...)
		l, err := first.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		crashing.Crash()
		if err := lock.Revoke(ctx, mem.Client(3, fastFaults), "x", l.Token()); err != nil {
			t.Fatal(err)
		}
		second, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "ns/p/uid", Incarnation: "2"}, opts...)
		start := time.Now()
		defer time.Sleep(10 * time.Second)
		l2, err := second.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Release(ctx)
		if took := time.Since(start); took < 3*time.Second {
			t.Fatalf("revoked grant taken over by the same identity after %v, want at least one lease", took)
		}
	})
}

// lostResponseStore applies conditional writes but, while armed, loses their response: the
// caller sees only its own context ending.
type lostResponseStore struct {
	lock.Store
	armed atomic.Bool
	sent  chan struct{}
}

func (s *lostResponseStore) CompareAndSwap(ctx context.Context, lockID string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	applied, cur, ok, err := s.Store.CompareAndSwap(ctx, lockID, prev, next)
	if !s.armed.Load() {
		return applied, cur, ok, err
	}
	s.sent <- struct{}{}
	<-ctx.Done()
	return false, lock.Record{}, false, fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, ctx.Err())
}

// TestCancelledAcquireLeavesNoGrant: when Acquire's context ends while its grant is in flight and
// the grant applied, Acquire settles it and gives the record back, so the next owner does not
// wait a lease for a grant nobody holds.
func TestCancelledAcquireLeavesNoGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		store := &lostResponseStore{Store: mem.Client(1, fastFaults), sent: make(chan struct{}, 1)}
		store.armed.Store(true)
		a, _ := lock.New(store, lock.Owner{Identity: "a", Incarnation: "1"}, lock.WithLease(15*time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error, 1)
		go func() {
			l, err := a.Acquire(ctx, "x")
			if l != nil {
				err = fmt.Errorf("granted token %d", l.Token())
			}
			errs <- err
		}()
		<-store.sent
		store.armed.Store(false)
		cancel()
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire: %v, want context.Canceled", err)
		}
		if rec, ok := mem.Record("x"); !ok || rec.Token == 0 {
			t.Fatalf("the grant did not apply (record %+v): the test proves nothing", rec)
		}
		b, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "b", Incarnation: "1"}, lock.WithLease(15*time.Second))
		start := time.Now()
		l, err := b.Acquire(context.Background(), "x")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		if took := time.Since(start); took > time.Second {
			t.Fatalf("next owner granted %v after the cancelled Acquire: its grant was left behind", took)
		}
	})
}

// TestRecreatedRecordNeverReissuesTokens: a record deleted behind the lock's back (a truncated
// table) starts again above every token it issued before.
func TestRecreatedRecordNeverReissuesTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		l, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "a", Incarnation: "1"}, lock.WithLease(3*time.Second))
		var last int64
		for range 3 {
			lease, err := l.Acquire(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			last = lease.Token()
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		mem.Delete("x")
		lease, err := l.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		if lease.Token() <= last {
			t.Fatalf("re-created record issued token %d after %d", lease.Token(), last)
		}
		if want := lock.FirstToken(time.Now()); lease.Token() > want {
			t.Fatalf("first token %d of a record created at %d µs", lease.Token(), want)
		}
	})
}

// unknownCASStore never applies a conditional write and never knows whether it did.
type unknownCASStore struct {
	lock.Store
	cas atomic.Int64
}

func (s *unknownCASStore) CompareAndSwap(ctx context.Context, lockID string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	s.cas.Add(1)
	return false, lock.Record{}, false, fmt.Errorf("%w: overloaded", lock.ErrUnknownOutcome)
}

// TestRevokeBacksOff: Revoke against a store that never confirms retries with growing pauses
// rather than in a tight loop.
func TestRevokeBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		l, _ := lock.New(mem.Client(1, memstore.Faults{}), lock.Owner{Identity: "a", Incarnation: "1"}, lock.WithLease(3*time.Second))
		lease, err := l.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		store := &unknownCASStore{Store: mem.Client(2, fastFaults)}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := lock.Revoke(rctx, store, "x", lease.Token()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Revoke on a store that never confirms: %v", err)
		}
		if n := store.cas.Load(); n < 3 || n > 15 {
			t.Fatalf("Revoke sent %d conditional writes in 10s; want a few, with growing pauses", n)
		}
	})
}

// enqueueCounter counts queue writes.
type enqueueCounter struct {
	lock.Store
	n atomic.Int64
}

func (s *enqueueCounter) Enqueue(ctx context.Context, lockID string, e lock.QueueEntry, ttl time.Duration) error {
	s.n.Add(1)
	return s.Store.Enqueue(ctx, lockID, e, ttl)
}

// TestDeepWaiterDoesNotRewriteEntryEveryPoll: a waiter further back than one queue read reaches
// (1,024 entries) refreshes its entry every TTL/3 like the others, instead of rewriting it (and
// leaving a tombstone) on every poll.
func TestDeepWaiterDoesNotRewriteEntryEveryPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		filler := mem.Client(1, memstore.Faults{})
		base := time.Now().Add(-time.Minute).UnixMicro()
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		// The 1,100 waiters ahead are alive: they refresh their entries every TTL/3, so that
		// nobody counts them dead (dropDead).
		refresh := func() {
			for i := range 1100 {
				if err := filler.Enqueue(ctx, "x", lock.QueueEntry{Enqueued: base + int64(i), Owner: fmt.Sprintf("w%04d#1", i)}, 10*time.Second); err != nil {
					t.Error(err)
					return
				}
			}
		}
		refresh()
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			for ctxtime.Sleep(wctx, 3*time.Second) == nil {
				refresh()
			}
		})
		store := &enqueueCounter{Store: mem.Client(2, fastFaults)}
		l, _ := lock.New(store, lock.Owner{Identity: "deep", Incarnation: "1"}) // defaults: TTL 10s
		if _, err := l.Acquire(wctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire behind 1,100 waiters: %v", err)
		}
		// One write to join, then one per TTL/3 (10s/3): about 19 in 60s.
		if n := store.n.Load(); n > 25 {
			t.Fatalf("waiter at position 1,101 wrote its queue entry %d times in 60s", n)
		}
	})
}

// TestLapsedLeaseIsNeverRevived: once the self-fence deadline has passed, the lease is invalid even
// before its fence timer runs, and a renewal that comes back afterwards does not revive it.
func TestLapsedLeaseIsNeverRevived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		clk := &testclock.Ahead{}
		l, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "a", Incarnation: "1"},
			lock.WithLease(3*time.Second), lock.WithRenewInterval(time.Second), lock.WithClock(clk))
		lease, err := l.Acquire(context.Background(), "x")
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		clk.Set(3 * time.Second) // past lease − margin since the grant was sent
		if lease.Valid() {
			t.Fatalf("lease valid with %v left after its deadline", lease.Remaining())
		}
		time.Sleep(1500 * time.Millisecond) // the next renewal (due 1s after the grant) comes back
		if lease.Valid() || !errors.Is(lease.Err(), lock.ErrLeaseExpired) {
			t.Fatalf("after a renewal that came back past the deadline: valid %v, err %v; want expired", lease.Valid(), lease.Err())
		}
		select {
		case <-lease.Done():
		default:
			t.Fatal("Done still open after the lease expired")
		}
	})
}

// TestRestartedWaiterSkipsItsDeadEntry: a waiter's process dies and restarts (same identity, new
// incarnation, WithZeroWaitRestart) while its queue entry is still alive. The new incarnation
// removes its predecessor's entry instead of waiting behind it until its TTL runs out, so when the
// holder releases it is granted at once; without the removal the dead entry at the head would
// hold the queue for up to its TTL (10 s by default).
func TestRestartedWaiterSkipsItsDeadEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		holder, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "ns/holder/uid-1", Incarnation: "1"})
		held, err := holder.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		// The first incarnation queued, then died: its entry lives on for its TTL.
		first, _ := lock.New(mem.Client(8, fastFaults), lock.Owner{Identity: "ns/waiter/uid-2", Incarnation: "1"}, lock.WithZeroWaitRestart(testRestartSecret))
		dead := lock.QueueEntry{Enqueued: time.Now().UnixMicro(), Owner: first.Owner().String()}
		if err := mem.Client(9, memstore.Faults{}).Enqueue(ctx, "x", dead, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		var mu sync.Mutex
		ahead := -1
		restarted, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "ns/waiter/uid-2", Incarnation: "2"},
			lock.WithZeroWaitRestart(testRestartSecret), lock.WithObserver(func(e lock.Event) {
				if e.Kind == lock.EventQueued {
					mu.Lock()
					ahead = e.Ahead
					mu.Unlock()
				}
			}))
		got, done := grantTime(ctx, t, restarted, "x")
		defer func() { <-done }()
		time.Sleep(2 * time.Second)
		mu.Lock()
		if ahead != 0 {
			t.Errorf("the restarted waiter counts %d ahead of it; want 0 (its predecessor's entry is not a waiter)", ahead)
		}
		mu.Unlock()
		if q, _ := mem.Client(9, memstore.Faults{}).Queue(ctx, "x", 0, 10); slices.ContainsFunc(q, dead.Same) {
			t.Errorf("the dead predecessor's entry is still queued: %v", q)
		}
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if at, ok := <-got; !ok || at.Sub(released) > 2*time.Second {
			t.Fatalf("the restarted waiter was granted %v after the release; want within two seconds", at.Sub(released))
		}
	})
}

// TestDeadHeadIsSkipped: the head of the queue dies (its process is cut off for good) while the
// lock is held, and its entry lives on for its TTL. When the holder releases, the waiter behind it
// sees the free record left untaken, removes the dead head's entry and is granted within a few
// seconds instead of waiting out the entry's TTL (10 s). A live head is never skipped: the
// fairness tests and the simulation check the queue order.
func TestDeadHeadIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if waited, ok := deadHeadWait(t); ok && waited > 4*time.Second {
			t.Errorf("the waiter behind a dead head was granted %v after the release; want within 4 s", waited)
		}
	})
}

// deadHeadWait runs a holder, a head and a waiter behind it on one lock, each Locker with opts;
// it cuts the head off for good while the lock is held, releases, and returns how long after the
// release the waiter was granted (ok false: the test is ending). Call it inside synctest.Test.
func deadHeadWait(t *testing.T, opts ...lock.Option) (waited time.Duration, ok bool) {
	t.Helper()
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "holder", Incarnation: "1"}, opts...)
	held, err := holder.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	headClient := mem.Client(2, fastFaults)
	head, _ := lock.New(headClient, lock.Owner{Identity: "head", Incarnation: "1"}, opts...)
	next, _ := lock.New(mem.Client(3, fastFaults), lock.Owner{Identity: "next", Incarnation: "1"}, opts...)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		if l, err := head.Acquire(ctx, "x"); err == nil {
			t.Errorf("the dead head was granted token %d", l.Token())
		}
	})
	waitQueued(t, mem, 1)
	got, done := grantTime(ctx, t, next, "x")
	defer func() { cancel(); <-done }()
	waitQueued(t, mem, 2)
	time.Sleep(time.Second)
	headClient.Crash()
	time.Sleep(3 * time.Second)
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at, ok := <-got:
		if !ok {
			return 0, false
		}
		t.Logf("granted %v after the release", at.Sub(released))
		return at.Sub(released), true
	case <-time.After(time.Minute):
		t.Fatal("the waiter behind a dead head was not granted within a minute")
	}
	return 0, false
}

// TestLeaseEndedAt: a released lease ended when Release was called; a lease whose process was
// paused past its deadline (both of its clocks jump ahead, as after SIGSTOP and SIGCONT) ended at
// its deadline, not when the process noticed, so that reports built on EndedAt never stretch a
// hold past the moment it stopped being valid.
func TestLeaseEndedAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := aheadLocker()
		wall := func() time.Time { return clk.Now() }
		ctx := context.Background()

		lease, err := l.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if !lease.EndedAt().IsZero() {
			t.Fatalf("EndedAt %v while held", lease.EndedAt())
		}
		time.Sleep(1500 * time.Millisecond)
		released := wall()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := lease.EndedAt(); !got.Equal(released) {
			t.Errorf("released lease: EndedAt %v, want the release at %v", got, released)
		}

		lease, err = l.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		granted := wall()         // the grant was sent no later than this
		clk.Set(10 * time.Second) // paused for 10 s: both clocks moved, no timer ran
		<-lease.Done()
		deadline := granted.Add(3*time.Second - 300*time.Millisecond) // lease − the default 10 % margin
		if got := lease.EndedAt(); got.After(deadline) || got.Before(deadline.Add(-100*time.Millisecond)) {
			t.Errorf("lease paused past its deadline: EndedAt %v after the grant, want its deadline, %v after the grant",
				got.Sub(granted), deadline.Sub(granted))
		}
	})
}

// aheadLocker returns a Locker (lease 3 s, renewals every second) on a fresh in-memory store
// whose monotonic and wall clocks are one clock the test can move ahead.
func aheadLocker() (*lock.Locker, *testclock.Ahead) {
	clk := &testclock.Ahead{}
	l, _ := lock.New(memstore.New().Client(1, memstore.Faults{}), lock.Owner{Identity: "a", Incarnation: "1"},
		lock.WithLease(3*time.Second), lock.WithRenewInterval(time.Second), lock.WithClock(clk),
		lock.WithWallClock(func() time.Time { return clk.Now() }))
	return l, clk
}

// TestLeaseDeadline: the deadline is the last successful write's send time plus the lease less
// the safety margin; renewals move it forward; a lease that ended keeps its last deadline, which
// is also when it ended if it lapsed.
func TestLeaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := aheadLocker()
		wall := func() time.Time { return clk.Now() }
		ctx := context.Background()
		lease, err := l.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		granted := wall()
		const valid = 3*time.Second - 300*time.Millisecond // lease − the default 10 % margin
		if d := lease.Deadline().Sub(granted); d > valid || d < valid-100*time.Millisecond {
			t.Fatalf("deadline %v after the grant, want %v", d, valid)
		}
		time.Sleep(2500 * time.Millisecond) // two renewals
		if d := lease.Deadline().Sub(wall()); d < valid-time.Second-100*time.Millisecond || d > valid {
			t.Fatalf("deadline %v ahead after renewals, want within a renew interval of %v", d, valid)
		}
		before := lease.Deadline()
		clk.Set(10 * time.Second) // paused: no renewal, the deadline passes
		<-lease.Done()
		if got := lease.Deadline(); !got.Equal(before) {
			t.Errorf("deadline moved from %v to %v when the lease lapsed", before, got)
		}
		if got := lease.EndedAt(); !got.Equal(before) {
			t.Errorf("a lapsed lease ended at %v, want its deadline %v", got, before)
		}
	})
}

// failingDequeue is a store whose queue removals fail, as they may under load (a timeout).
type failingDequeue struct{ lock.Store }

func (failingDequeue) Dequeue(context.Context, string, lock.QueueEntry) error {
	return errors.New("dequeue timed out")
}

// TestHoldersLeftoverEntryIsSkipped: a waiter is granted the lock, but removing its queue entry
// fails, and then its process dies. The waiter behind that leftover entry finds it is the
// holder's own (the holder is not waiting), removes it and takes over after observing the dead
// holder's lease, instead of waiting behind the entry until its TTL runs out.
func TestHoldersLeftoverEntryIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		first, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "first", Incarnation: "1"}, lock.WithLease(3*time.Second))
		held, err := first.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		leftoverClient := mem.Client(2, fastFaults)
		leftover, _ := lock.New(failingDequeue{leftoverClient}, lock.Owner{Identity: "leftover", Incarnation: "1"}, lock.WithLease(3*time.Second))
		next, _ := lock.New(mem.Client(3, fastFaults), lock.Owner{Identity: "next", Incarnation: "1"}, lock.WithLease(3*time.Second))
		granted := make(chan *lock.Lease, 1)
		go func() {
			l, err := leftover.Acquire(ctx, "x")
			if err != nil {
				t.Error(err)
			}
			granted <- l
		}()
		time.Sleep(time.Second)
		got, done := grantTime(ctx, t, next, "x")
		defer func() { cancel(); <-done }()
		time.Sleep(time.Second)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		dying := <-granted
		defer func() { _ = dying.Release(context.Background()) }() // returns once its goroutines gave up
		time.Sleep(100 * time.Millisecond)
		leftoverClient.Crash() // dies holding, its entry left in the queue (TTL 10 s)
		died := time.Now()
		select {
		case at, ok := <-got:
			if !ok {
				t.Fatal("the waiter behind the leftover entry was not granted")
			}
			if waited := at.Sub(died); waited > 8*time.Second {
				t.Errorf("the waiter behind the holder's leftover entry was granted %v after the holder died; want within 8 s (a lease and a watch)", waited)
			} else {
				t.Logf("granted %v after the holder died", waited)
			}
		case <-time.After(time.Minute):
			t.Fatal("the waiter behind the leftover entry was not granted within a minute")
		}
	})
}

// TestDeadWaitersAreSkipped: two waiters queued behind the holder die, and a live waiter and then
// another queue behind them. Nobody is next in line behind a dead head (the live waiters are
// second and third), so only the dead entries' Written stamps tell that their waiters stopped
// refreshing them: the live waiters remove them and are granted in their order within
// staleEntryAfter (10 s + 2 s with this TTL) of the deaths, where without that they wait until the
// entries age out 30 s after their last refresh (WithoutDeadWaiterSkip, which must miss the bound).
//
// In holder-dies-too the holder crashes with them (lease 15 s): the live waiters start observing
// its record while the dead entries are still ahead, so the first is granted about a lease after
// it began watching, not a lease after the entries are gone (12 s later).
func TestDeadWaitersAreSkipped(t *testing.T) {
	for _, tc := range []struct {
		name       string
		holderDies bool
		bound      time.Duration
		skip       bool
		extra      []lock.Option
	}{
		{"skip", false, 16 * time.Second, true, nil},
		{"without-skip", false, 16 * time.Second, false, []lock.Option{lock.WithoutDeadWaiterSkip()}},
		{"holder-dies-too", true, 21 * time.Second, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				newLocker := func(client uint64, name string) (*lock.Locker, *memstore.Client) {
					c := mem.Client(client, fastFaults)
					l, err := lock.New(c, lock.Owner{Identity: name, Incarnation: "1"}, append([]lock.Option{lock.WithQueueEntryTTL(30 * time.Second)}, tc.extra...)...)
					if err != nil {
						t.Fatal(err)
					}
					return l, c
				}
				holder, holderClient := newLocker(1, "holder")
				held, err := holder.Acquire(ctx, "x")
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				defer wg.Wait()
				defer cancel()
				var dead []*memstore.Client
				for i := range 2 {
					l, c := newLocker(uint64(2+i), fmt.Sprintf("dead-%d", i))
					dead = append(dead, c)
					wg.Go(func() {
						if l, err := l.Acquire(ctx, "x"); err == nil {
							t.Errorf("a dead waiter was granted token %d", l.Token())
						}
					})
					time.Sleep(100 * time.Millisecond)
				}
				live, _ := newLocker(4, "live")
				liveGot, liveDone := grantTime(ctx, t, live, "x")
				time.Sleep(100 * time.Millisecond)
				next, _ := newLocker(5, "next")
				nextGot, nextDone := grantTime(ctx, t, next, "x")
				defer func() { cancel(); <-liveDone; <-nextDone }()
				time.Sleep(time.Second)
				for _, c := range dead {
					c.Crash()
				}
				if tc.holderDies {
					defer func() { _ = held.Release(context.Background()) }() // returns once its goroutines gave up
					holderClient.Crash()
				}
				died := time.Now()
				time.Sleep(time.Second)
				if !tc.holderDies {
					if err := held.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
				timeout := time.After(time.Minute)
				var at [2]time.Time
				for i, got := range []<-chan time.Time{liveGot, nextGot} {
					select {
					case g, ok := <-got:
						if !ok {
							return
						}
						at[i] = g
					case <-timeout:
						t.Fatal("the waiters behind dead ones were not granted within a minute")
					}
				}
				if !at[0].Before(at[1]) {
					t.Errorf("granted out of queue order: live at %v, next at %v", at[0].Sub(died), at[1].Sub(died))
				}
				within := at[1].Sub(died) <= tc.bound
				t.Logf("granted %v and %v after the deaths", at[0].Sub(died), at[1].Sub(died))
				if within != tc.skip {
					t.Errorf("granted %v after the deaths; want within %v: %v", at[1].Sub(died), tc.bound, tc.skip)
				}
			})
		})
	}
}

// grantTime acquires lockID with l in the background. got yields when it was granted, or closes
// without a value when the acquisition failed (an error unless ctx ended); done closes once the
// lease was released again.
func grantTime(ctx context.Context, t *testing.T, l *lock.Locker, lockID string) (got <-chan time.Time, done <-chan struct{}) {
	return acquireInBackground(ctx, t, l, lockID, false)
}

// acquireInBackground acquires lockID with l in a goroutine and sends the time of the grant (or
// closes got without one when the acquisition failed: an error unless ctx ended). It releases
// the lease at once, or with hold once ctx ends; done closes after the release.
func acquireInBackground(ctx context.Context, t *testing.T, l *lock.Locker, lockID string, hold bool) (got <-chan time.Time, done <-chan struct{}) {
	granted, released := make(chan time.Time, 1), make(chan struct{})
	go func() {
		defer close(released)
		lease, err := l.Acquire(ctx, lockID)
		if err != nil {
			if ctx.Err() == nil {
				t.Error(err)
			}
			close(granted)
			return
		}
		granted <- time.Now()
		if hold {
			<-ctx.Done()
		}
		_ = lease.Release(context.Background())
	}()
	return granted, released
}

// TestZeroWaitNeedsTheRestartProof: a process that copied a live holder's identity (readable from
// the owner record, or from the pod) but not its restart secret queues like a stranger; only a
// restart that knows the secret takes the grant over at once (issue 22, item 7).
func TestZeroWaitNeedsTheRestartProof(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutant []lock.Option
	}{{name: "lock"}, {name: "mutant", mutant: []lock.Option{lock.WithMutation("zero-wait-without-proof")}}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				ctx := context.Background()
				const lease = 3 * time.Second
				defer time.Sleep(2 * lease) // lost leases find out and end
				opts := func(secret string) []lock.Option {
					return append([]lock.Option{lock.WithLease(lease), lock.WithZeroWaitRestart([]byte(secret))}, tc.mutant...)
				}
				holder, _ := lock.New(mem.Client(1, fastFaults), lock.Owner{Identity: "ns/p/uid", Incarnation: "1"}, opts("secret-of-the-real-pod")...)
				held, err := holder.Acquire(ctx, "x")
				if err != nil {
					t.Fatal(err)
				}
				defer held.Release(ctx)
				if !strings.Contains(held.Owner().String(), "~") {
					t.Fatalf("owner %q carries no restart tag", held.Owner())
				}
				copier, _ := lock.New(mem.Client(2, fastFaults), lock.Owner{Identity: "ns/p/uid", Incarnation: "2"}, opts("secret-of-another-pod")...)
				wctx, cancel := context.WithTimeout(ctx, 2*lease)
				defer cancel()
				l, err := copier.Acquire(wctx, "x")
				if tc.mutant != nil {
					if err == nil {
						t.Logf("caught as expected: the copier was granted token %d while the holder (token %d) is valid: %v", l.Token(), held.Token(), held.Valid())
						_ = l.Release(ctx)
						return
					}
					t.Fatal("a zero-wait restart that needs no proof was not granted the copied identity's lock: the test cannot see the fault")
				}
				if err == nil {
					defer l.Release(ctx)
					t.Fatalf("a process with a copied identity and another secret was granted token %d while the holder (token %d) is valid: %v",
						l.Token(), held.Token(), held.Valid())
				}
				if !held.Valid() {
					t.Fatalf("the holder lost its lease: %v", held.Err())
				}
			})
		})
	}
}
