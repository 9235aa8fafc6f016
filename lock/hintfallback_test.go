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

// The adaptive fallback (docs/design.md, "The poll schedule"): a Locker that listens for hints but
// finds by a poll what a hint should have told it goes back to the unhinted schedule for a while.

// lostHintRounds runs lockers Lockers at the default options with every hint lost, all of them
// taking the lock in turn for rounds rounds (each releases as soon as it is granted and queues
// again), and returns every hand-off, from one grant to the next, in grant order.
func lostHintRounds(t *testing.T, lockers, rounds int) []time.Duration {
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hinter := dropHints{localhint.New()}
	gate := numberedLocker(t, mem, lockers, lock.WithHinter(hinter))
	held, err := gate.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	grants := make(chan time.Time, lockers*rounds)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range lockers {
		l := numberedLocker(t, mem, i, lock.WithHinter(hinter))
		wg.Go(func() {
			for range rounds {
				lease, err := l.Acquire(ctx, "x")
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				grants <- time.Now()
				_ = lease.Release(context.Background())
			}
		})
		waitQueued(t, mem, i+1)
	}
	time.Sleep(5 * time.Second)
	last := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var took []time.Duration
	for range lockers * rounds {
		select {
		case at := <-grants:
			took = append(took, at.Sub(last))
			last = at
		case <-time.After(time.Minute):
			t.Fatalf("no grant within a minute of the last (%d hand-offs so far: %v)", len(took), took)
		}
	}
	return took
}

// TestHintsLostHandOffBound: with every hint lost (UDP blocked between pods), a chain of hinted
// Lockers at the default options hands the lock down the queue within 1.5 s each time, for four
// rounds: the head sees the free record by its own poll, the waiters behind it poll as without
// hints because their probes go unanswered (next in line about every 0.67 s), and the waiter that
// moved up to the head by a poll falls back to the unhinted schedule (head poll 125 ms).
func TestHintsLostHandOffBound(t *testing.T) {
	const lockers, rounds, bound = 5, 4, 1500 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		took := lostHintRounds(t, lockers, rounds)
		var worst time.Duration
		for i, d := range took {
			worst = max(worst, d)
			if d > bound {
				t.Errorf("hand-off %d (round %d) took %v with every hint lost; want within %v", i+1, i/lockers+1, d, bound)
			}
		}
		t.Logf("every hint lost: first round %v; at most %v in %d hand-offs", took[:lockers], worst, len(took))
	})
}

// TestHintsLostFromTheStart: a fresh queue of five Lockers at the default options, every hint
// lost from the start (UDP blocked between pods before anyone queued, so no Locker has missed a
// hint yet): every hand-off down the queue, the first of each Locker included, within 1.5 s.
func TestHintsLostFromTheStart(t *testing.T) {
	const lockers, bound = 5, 1500 * time.Millisecond // a literal: not scaled from any poll
	synctest.Test(t, func(t *testing.T) {
		took := lostHintRounds(t, lockers, 1)
		for i, d := range took {
			if d > bound {
				t.Errorf("hand-off %d of a fresh queue took %v with every hint lost; want within %v", i+1, d, bound)
			}
		}
		t.Logf("every hint lost from the start: hand-offs %v", took)
	})
}

// TestDeadHeadIsSkippedWithHints: TestDeadHeadIsSkipped with every Locker listening for hints. The
// release tells the waiter behind the head of the free record too; it looks again once a live head
// would have taken it (deadHeadFree, 4 s for a hinted head) and skips the dead head then: granted
// within 5 s of the release, where its rest polls (10 s) and record reads every other step made it
// about 16 s.
func TestDeadHeadIsSkippedWithHints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if waited, ok := deadHeadWait(t, lock.WithHinter(localhint.New())); ok && waited > 5*time.Second {
			t.Errorf("the waiter behind a dead head (with hints) was granted %v after the release; want within 5 s", waited)
		}
	})
}

// removalWatch is a lock.Store that counts removals of other owners' queue entries.
type removalWatch struct {
	lock.Store
	owner   string
	mu      *sync.Mutex
	removed *[]string
}

func (s removalWatch) Dequeue(ctx context.Context, lockID string, e lock.QueueEntry) error {
	if e.Owner != s.owner {
		s.mu.Lock()
		*s.removed = append(*s.removed, s.owner+" removed "+e.Owner)
		s.mu.Unlock()
	}
	return s.Store.Dequeue(ctx, lockID, e)
}

// TestHintedWaitersKeepTheirEntries: four waiters that listen for hints wait two minutes behind a
// live holder. Their steps are rare (rest polls of 10 s, the head's rewrite at its last head poll
// before it is due: capWait, rewriteEarly), and stray hints wake them at other moments, yet each
// rewrites its entry in time: nobody ever counts a live entry dead and removes it (staleEntryAfter:
// 12 s for a hinted entry).
func TestHintedWaitersKeepTheirEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		hinter := localhint.New()
		var mu sync.Mutex
		var removed []string
		locker := func(i int) *lock.Locker {
			owner := lock.Owner{Identity: "w" + string(rune('0'+i)), Incarnation: "1"}
			store := removalWatch{Store: mem.Client(uint64(i+1), fastFaults), owner: owner.String(), mu: &mu, removed: &removed}
			l, err := lock.New(store, owner, lock.WithHinter(hinter))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		held, err := locker(0).Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Release(context.Background()) }() // after the waiters gave up
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		for i := 1; i <= 4; i++ {
			l := locker(i)
			wg.Go(func() {
				if lease, err := l.Acquire(ctx, "x"); err == nil {
					t.Errorf("waiter %d was granted while the holder held", i)
					_ = lease.Release(context.Background())
				}
			})
			waitQueued(t, mem, i)
			time.Sleep(time.Duration(i) * 1300 * time.Millisecond) // spread their rewrite phases
		}
		// Stray hints (stale or forged: rule 6) wake the waiters at other moments than their rest
		// polls, every 7 s: after such a step the rewrite must still come in time.
		stray := time.NewTicker(7 * time.Second)
		defer stray.Stop()
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); {
			<-stray.C
			q, _ := mem.Client(9, memstore.Faults{}).Queue(context.Background(), "x", 0, 10)
			for _, e := range q {
				hinter.Send(e.Hint, lock.Hint{LockID: "x", Owner: e.Owner, Enqueued: e.Enqueued, Kind: lock.HintAhead})
			}
		}
		mu.Lock()
		if len(removed) > 0 {
			t.Errorf("live entries removed while waiting %v: %v", 2*time.Minute, removed)
		}
		mu.Unlock()
		if q, _ := mem.Client(9, memstore.Faults{}).Queue(context.Background(), "x", 0, 10); len(q) != 4 {
			t.Errorf("%d entries queued after two minutes, want 4", len(q))
		}
	})
}

// noEchoes is the Hinter of a release before probes: it carries hints but answers no probe (its
// parser drops them as malformed).
type noEchoes struct{ *localhint.Hinter }

func (h noEchoes) Send(addr string, hint lock.Hint) {
	if hint.Kind != lock.HintProbe {
		h.Hinter.Send(addr, hint)
	}
}

// TestNoEchoMeansPolling: a waiter behind the head whose probes go unanswered (the waiter ahead
// runs a release before probes, or UDP is blocked) cannot count on hints and steps as a waiter
// without hints, about once a second instead of once every 10 s; the echoes of the same probes
// bring it back to the hinted schedule. Waiter 2 is measured for a minute of virtual time.
func TestNoEchoMeansPolling(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hinter   func(*localhint.Hinter) lock.Hinter
		min, max float64 // waiter 2's requests per second
	}{
		{"no-echoes", func(h *localhint.Hinter) lock.Hinter { return noEchoes{h} }, 0.8, 2},
		{"echoes", func(h *localhint.Hinter) lock.Hinter { return h }, 0, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				hinter := tc.hinter(localhint.New())
				clients := make([]*memstore.Client, 3)
				var wg sync.WaitGroup
				defer wg.Wait()
				defer cancel()
				var held *lock.Lease
				for i := range clients {
					clients[i] = mem.Client(uint64(i+1), fastFaults)
					l, err := lock.New(clients[i], lock.Owner{Identity: fmt.Sprintf("c%d", i), Incarnation: "1"}, lock.WithHinter(hinter))
					if err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						if held, err = l.Acquire(ctx, "x"); err != nil {
							t.Fatal(err)
						}
						continue
					}
					wg.Go(func() {
						if lease, err := l.Acquire(ctx, "x"); err == nil {
							_ = lease.Release(context.Background())
						}
					})
					waitQueued(t, mem, i)
				}
				defer func() { _ = held.Release(context.Background()) }()
				time.Sleep(10 * time.Second)
				before := clients[2].Requests()
				const window = time.Minute
				time.Sleep(window)
				rate := float64(clients[2].Requests()-before) / window.Seconds()
				t.Logf("waiter 2 (behind the head) made %.2f requests/s", rate)
				if rate < tc.min || rate > tc.max {
					t.Errorf("waiter 2 made %.2f requests/s; want between %v and %v", rate, tc.min, tc.max)
				}
			})
		})
	}
}
