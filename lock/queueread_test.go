package lock_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/testing/localhint"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// removalLog wraps a store and records, for every queue read, how many removed entries lay at or
// after the read's bound: what Cassandra has to pass over as tombstones (memstore keeps none).
type removalLog struct {
	lock.Store
	shared *removals
}

type removals struct {
	mu      sync.Mutex
	removed []int64 // enqueue times of the removed entries, in removal order
	reads   []queueRead
}

type queueRead struct {
	from       int64
	passedOver int
}

func (s removalLog) Dequeue(ctx context.Context, lockID string, e lock.QueueEntry) error {
	err := s.Store.Dequeue(ctx, lockID, e)
	if err == nil {
		s.shared.mu.Lock()
		s.shared.removed = append(s.shared.removed, e.Enqueued)
		s.shared.mu.Unlock()
	}
	return err
}

func (s removalLog) Queue(ctx context.Context, lockID string, from int64, limit int) ([]lock.QueueEntry, error) {
	s.shared.mu.Lock()
	r := queueRead{from: from}
	for _, enqueued := range s.shared.removed {
		if enqueued >= from {
			r.passedOver++
		}
	}
	s.shared.reads = append(s.shared.reads, r)
	s.shared.mu.Unlock()
	return s.Store.Queue(ctx, lockID, from, limit)
}

// fullQueueReadEvery is lock's period of whole-queue reads.
const fullQueueReadEvery = 5 * time.Second

// TestQueueReadsPassOverFewRemovedEntries: three Lockers hand one lock around as fast as they can
// for 20 s (thousands of hand-overs, each removing a queue entry). Their queue reads start a
// little before the oldest live entry, so a read passes over the removed entries of the last
// moment only, not all of them; a read of the whole queue comes at most once per five seconds per
// Locker.
func TestQueueReadsPassOverFewRemovedEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		hinter := localhint.New()
		log := &removals{}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		const lockers, run = 3, 20 * time.Second
		for i := range lockers {
			store := removalLog{Store: mem.Client(uint64(i+1), fastFaults), shared: log}
			l, err := lock.New(store, lock.Owner{Identity: string(rune('a' + i)), Incarnation: "1"}, lock.WithHinter(hinter))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for ctx.Err() == nil {
					if lease, err := l.Acquire(ctx, "x"); err == nil {
						_ = lease.Release(context.Background())
					}
				}
			})
		}
		time.Sleep(run)
		cancel()
		wg.Wait()

		log.mu.Lock()
		defer log.mu.Unlock()
		removed := len(log.removed)
		if removed < 1000 {
			t.Fatalf("only %d queue entries removed in %v; the test needs hand-overs", removed, run)
		}
		perSecond := float64(removed) / run.Seconds()
		var whole, bounded, passedOver int
		for _, r := range log.reads {
			if r.from == 0 {
				whole++
				continue
			}
			bounded++
			passedOver += r.passedOver
		}
		mean := float64(passedOver) / float64(max(bounded, 1))
		t.Logf("%d entries removed (%.0f/s); %d whole-queue reads, %d bounded reads passing over %.1f removed entries on average",
			removed, perSecond, whole, bounded, mean)
		if limit := lockers * (int(run/(5*time.Second)) + 1); whole > limit {
			t.Errorf("%d whole-queue reads; want at most %d (one per 5 s per Locker)", whole, limit)
		}
		// The bound trails the oldest entry by 250 ms: about that many hand-overs' entries.
		if limit := perSecond / 2; mean > limit {
			t.Errorf("a bounded read passes over %.1f removed entries on average; want at most %.0f (half a second of removals)", mean, limit)
		}
	})
}

// TestSkewedWaiterIsServed: a waiter whose wall clock runs 30 s behind enqueues under a time
// before every other Locker's queue-read bound, so their bounded reads do not see it. Their reads
// of the whole queue (at least every 5 s) do: the waiter is the oldest entry, so the next release
// hands it the lock, ahead of the two Lockers that keep handing it to each other. Without those
// reads (WithoutWholeQueueReads) no release hands it the lock (no release hint is sent to it), which
// the test checks too, so that it is known to be able to fail. (How long it waits then is a matter of
// luck: a head poll of its own may land in the few milliseconds of a hand-off when the record is
// free, 4.8 s after it arrived at one phase, 6 to 16 s at others.)
func TestSkewedWaiterIsServed(t *testing.T) {
	for _, whole := range []bool{true, false} {
		name := "whole-reads"
		if !whole {
			name = "no-whole-reads"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { skewedWaiter(t, whole) })
		})
	}
}

func skewedWaiter(t *testing.T, whole bool) {
	mem := memstore.New()
	hinter := &recordingHinter{Hinter: localhint.New()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	opts := []lock.Option{lock.WithHinter(hinter)}
	if !whole {
		opts = append(opts, lock.WithoutWholeQueueReads())
	}
	for i := range 2 {
		l := numberedLocker(t, mem, i, opts...)
		wg.Go(func() {
			for ctx.Err() == nil {
				if lease, err := l.Acquire(ctx, "x"); err == nil {
					time.Sleep(200 * time.Millisecond) // few free moments to barge into
					_ = lease.Release(context.Background())
				}
			}
		})
	}
	// Both have read the whole queue (at 0, 5 and 10 s), and bound their reads since: the skewed
	// waiter arrives just after a whole read, the worst moment.
	time.Sleep(10*time.Second + 300*time.Millisecond)
	behind := func() time.Time { return time.Now().Add(-30 * time.Second) }
	skewed := numberedLocker(t, mem, 2, append(opts, lock.WithWallClock(behind))...)
	start := time.Now()
	actx, acancel := context.WithTimeout(ctx, time.Minute)
	defer acancel()
	lease, err := skewed.Acquire(actx, "x")
	waited := time.Since(start)
	if err == nil {
		_ = lease.Release(context.Background())
	}
	cancel()
	freeHints := 0
	for _, h := range hinter.take() {
		if h.Owner == skewed.Owner().String() && h.Kind == lock.HintFree {
			freeHints++
		}
	}
	t.Logf("the skewed waiter waited %v (%v), %d release hints sent to it", waited, err, freeHints)
	limit := fullQueueReadEvery + time.Second // one whole-queue read period and a hold
	switch {
	case whole && (err != nil || waited > limit):
		t.Errorf("the skewed waiter waited %v (%v); want it served within %v", waited, err, limit)
	case !whole && freeHints > 0:
		t.Errorf("without whole-queue reads a release told the skewed waiter of %d free records; the test needs the releases not to see it", freeHints)
	}
}
