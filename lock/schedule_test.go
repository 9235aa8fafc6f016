package lock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/testing/localhint"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// The poll schedule with hints (docs/design.md, "The poll schedule"): hints wake the
// waiters, and polls are a safety net. These tests pin the two bounds the safety net gives, on
// virtual time with the default options: a lost release hint costs the head at most one hinted
// head poll (MaxHintedHeadPoll at the default lease), and a crashed holder's lock is taken over
// within about 1.05 leases. A schedule that polls the head less often fails both.

// dropHints is a Hinter that listens (waiters get an address and so keep to the hinted schedule)
// but loses every hint sent.
type dropHints struct{ *localhint.Hinter }

func (dropHints) Send(string, lock.Hint) {}

// TestLostHintBound: with every hint lost, the head of the queue is granted a released lock
// within one hinted head poll (1 s at the default lease, plus its 10 % jitter and the requests),
// whatever the moment of the release; the waiter behind it, whose probes went unanswered, within
// 1.5 s of the head's grant (it polls as without hints: hintprobe.go), not a rest poll (10 s).
func TestLostHintBound(t *testing.T) {
	const releases = 20
	// A literal, not scaled from MaxHintedHeadPoll: a longer head poll must fail this test, not
	// move its bound (1 s + 10 % jitter + 50 ms of requests).
	const bound = 1150 * time.Millisecond
	// The waiter behind the head, granted after it: a literal too (a head poll, about 0.7 s of
	// polling as next in line and the requests), where waiting for its rest poll takes 10 s.
	const restBound = 1500 * time.Millisecond
	var worst, worstNext time.Duration
	for i := range releases {
		synctest.Test(t, func(t *testing.T) {
			// Release at phases spread over two head polls, after the head has been waiting for
			// a while (several renewals and entry rewrites).
			phase := 20*time.Second + time.Duration(i)*2*lock.MaxHintedHeadPoll/releases
			waited, next := lostHintHandOff(t, phase)
			worst, worstNext = max(worst, waited), max(worstNext, next)
			if waited > bound {
				t.Errorf("release %d: with every hint lost the head was granted %v after the release; want within %v", i, waited, bound)
			}
			if next > restBound {
				t.Errorf("release %d: the next waiter was granted %v after the head; want within %v", i, next, restBound)
			}
		})
	}
	t.Logf("with every hint lost: the head granted at most %v after a release (bound %v), the waiter behind it at most %v after the head (bound %v), %d releases",
		worst, bound, worstNext, restBound, releases)
}

// lostHintHandOff queues a head and a waiter behind a holder, every hint lost, releases the lock
// after phase, and returns how long the head took to be granted, and how long after that the
// waiter behind it, which the head releases at once.
func lostHintHandOff(t *testing.T, phase time.Duration) (head, next time.Duration) {
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hinter := dropHints{localhint.New()}
	lockers := make([]*lock.Locker, 3)
	for i := range lockers {
		lockers[i] = numberedLocker(t, mem, i, lock.WithHinter(hinter))
	}
	held, err := lockers[0].Acquire(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	granted := make([]chan time.Time, 3)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := 1; i < 3; i++ {
		granted[i] = make(chan time.Time, 1)
		wg.Go(func() {
			lease, err := lockers[i].Acquire(ctx, "lost")
			if err != nil {
				return
			}
			granted[i] <- time.Now()
			_ = lease.Release(context.Background())
		})
		time.Sleep(time.Second) // queue in a known order
	}
	time.Sleep(phase)
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var at [3]time.Time
	for i := 1; i < 3; i++ {
		select {
		case at[i] = <-granted[i]:
		case <-time.After(time.Minute):
			t.Fatalf("waiter %d was not granted within a minute of the release", i)
		}
	}
	return at[1].Sub(released), at[2].Sub(at[1])
}

// TestCrashFailoverBound: a holder whose process crashes at any moment between two renewals loses
// its lock to the head of the queue (listening for hints, at the default lease) within a lease plus
// one hinted head poll of the crash, and within 1.05 leases at the 95th percentile over crashes
// spread evenly over a renewal interval. A head that reads the owner record only at the start and
// the end of a lease (or at its rest poll) sees the holder's last renewal late and fails both.
func TestCrashFailoverBound(t *testing.T) {
	const crashes = 40
	lease := lock.DefaultLease
	bound := lease + lock.MaxHintedHeadPoll*11/10 + 50*time.Millisecond
	failovers := make([]time.Duration, 0, crashes)
	for i := range crashes {
		synctest.Test(t, func(t *testing.T) {
			// The crash's moment and the head's arrival both spread over a renewal interval,
			// independently (17 and 40 are coprime), so that the head's reads are not in step
			// with the renewals.
			renew := lease / 3
			arrive := time.Duration(i*17%crashes) * renew / crashes
			crash := 20*time.Second + time.Duration(i)*renew/crashes
			d := crashFailover(t, arrive, crash)
			failovers = append(failovers, d)
			if d > bound {
				t.Errorf("crash %d: failover took %v; want within %v", i, d, bound)
			}
		})
	}
	slices.Sort(failovers)
	p95 := failovers[len(failovers)*95/100-1]
	ratio := func(d time.Duration) float64 { return float64(d) / float64(lease) }
	t.Logf("crash failover over %d crashes: min %.3f, p50 %.3f, p95 %.3f, max %.3f × lease", crashes,
		ratio(failovers[0]), ratio(failovers[len(failovers)/2]), ratio(p95), ratio(failovers[len(failovers)-1]))
	if ratio(p95) > 1.05 {
		t.Errorf("crash failover p95 %.3f × lease; want ≤ 1.05", ratio(p95))
	}
}

// crashFailover lets a holder hold, with a head arriving arrive after the grant, crashes the
// holder's process crash after the grant and returns how long after the crash the head was
// granted.
func crashFailover(t *testing.T, arrive, crash time.Duration) time.Duration {
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hinter := localhint.New()
	holderClient := mem.Client(1, fastFaults)
	holder, err := lock.New(holderClient, lock.Owner{Identity: "holder", Incarnation: "1"}, lock.WithHinter(hinter))
	if err != nil {
		t.Fatal(err)
	}
	held, err := holder.Acquire(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }() // fails on the crashed client; ends its goroutines
	time.Sleep(arrive)
	head := numberedLocker(t, mem, 1, lock.WithHinter(hinter))
	got, done := grantTime(ctx, t, head, "crash")
	defer func() { cancel(); <-done }()
	time.Sleep(crash - arrive)
	return grantedAfterCrash(t, holderClient.Crash, got, "the head")
}

// grantedAfterCrash calls crash (a client cut off for good) and returns how long after it got
// yielded a grant; the test fails when who gave up or was not granted within three leases.
func grantedAfterCrash(t *testing.T, crash func(), got <-chan time.Time, who string) time.Duration {
	t.Helper()
	crash()
	crashed := time.Now()
	select {
	case at, ok := <-got:
		if !ok {
			t.Fatalf("%s gave up", who)
		}
		return at.Sub(crashed)
	case <-time.After(3 * lock.DefaultLease):
		t.Fatalf("%s was not granted within three leases of the crash", who)
	}
	return 0
}

// TestCrashFailoverWorstCase: the worst phase for TestCrashFailoverBound, set up on purpose: the
// head reads the owner record just before a renewal lands, and the holder crashes right after it.
// The head sights that last write only at its next read, a head poll (plus jitter) later, and takes
// the lock over a lease after that sighting: within a lease plus 1.1 head polls of the crash.
func TestCrashFailoverWorstCase(t *testing.T) {
	lease := lock.DefaultLease
	renew := lease / 3 // the holder's first renewal is sent renew after its grant
	bound := lease + 1100*time.Millisecond + 50*time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		d := crashFailover(t, renew-20*time.Millisecond, renew+20*time.Millisecond)
		if d > bound {
			t.Errorf("worst-case failover took %v; want within %v (lease + 1.1 head polls + requests)", d, bound)
		}
		t.Logf("worst-case failover: %v (%.3f × lease)", d, float64(d)/float64(lease))
	})
}
