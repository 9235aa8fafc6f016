package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/testing/localhint"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// slowLWTFaults are fastFaults for a client whose lightweight transactions are slow (Paxos
// contention, a loaded replica): 20 ms more than a plain read or write.
var slowLWTFaults = memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 3 * time.Millisecond, LWTLatency: 20 * time.Millisecond}

// TestHintedHeadKeepsItsPlace: the head of the queue, told by a release hint that the lock is
// free, keeps its queue entry until its grant has landed. A Try-mode newcomer that asks at any
// moment of the hand-off must find the head still queued and give way: it is never granted ahead
// of the waiter (issue 22, item 5).
func TestHintedHeadKeepsItsPlace(t *testing.T) {
	const cycles = 60
	run := func(t *testing.T, opts ...lock.Option) (overtaken int) {
		var tries int
		for cycle := range cycles {
			synctest.Test(t, func(t *testing.T) {
				o, n := hintedHandOff(t, cycle, opts...)
				overtaken += o
				tries += n
			})
		}
		t.Logf("%d hand-offs, %d Try-mode attempts during them: %d granted ahead of the waiting head", cycles, tries, overtaken)
		return overtaken
	}
	t.Run("lock", func(t *testing.T) {
		if overtaken := run(t); overtaken > 0 {
			t.Errorf("a Try-mode newcomer was granted ahead of the hinted head in %d of %d hand-offs", overtaken, cycles)
		}
	})
	// A head that removes its entry before its grant lands: the test must see it.
	t.Run("mutant", func(t *testing.T) {
		if run(t, lock.WithMutation("dequeue-before-grant")) == 0 {
			t.Error("a head that leaves the queue before its grant lands was never overtaken: the test cannot see the fault")
		}
	})
}

// TestForgedHintCostsReadsOnly: a release hint carries no authority (docs/design.md, Hand-off
// hints). A forged "free" hint that names a record version, with the lock held, costs the head
// reads only: no conditional write on the lock's partition, no removal and rewrite of its queue
// entry (issue 22, item 6).
func TestForgedHintCostsReadsOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []lock.Option
		mutant bool
	}{
		{name: "lock"},
		{name: "mutant", opts: []lock.Option{lock.WithMutation("cas-on-hint")}, mutant: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				writes := forgedHintWrites(t, tc.opts...)
				t.Logf("requests of the head for 6 forged hints: %v", writes)
				bad := writes["cas"] + writes["dequeue"]
				switch {
				case !tc.mutant && bad > 0:
					t.Errorf("forged hints made the head send %d conditional writes and %d queue removals; want reads only", writes["cas"], writes["dequeue"])
				case tc.mutant && bad == 0:
					t.Error("a head that sends its grant on the hint's word made no conditional write: the test cannot see the fault")
				}
			})
		})
	}
}

// forgedHintWrites sends the head of lock x's queue forged "free" hints naming versions above 0
// while the lock is held, within the hint budget, and returns the head's store requests by kind.
func forgedHintWrites(t *testing.T, opts ...lock.Option) map[string]int {
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hinter := localhint.New()
	const lease = 5 * time.Second
	base := []lock.Option{lock.WithLease(lease), lock.WithHinter(hinter)}
	holder := numberedLocker(t, mem, 0, base...)
	held, err := holder.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	counted := &dequeueCounter{countingStore{Store: mem.Client(2, fastFaults), n: map[string]int{}}}
	head, err := lock.New(counted, lock.Owner{Identity: "c1", Incarnation: "1"}, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	granted, done := grantTime(ctx, t, head, "x")
	waitQueued(t, mem, 1)
	time.Sleep(1500 * time.Millisecond) // the head knows it is the head
	queue, _ := mem.Client(9, memstore.Faults{}).Queue(ctx, "x", 0, 10)
	entry := queue[0]
	rec, _ := mem.Record("x")
	counted.reset()
	for i, version := range []int64{rec.Version + 1, rec.Version + 2, rec.Version, 1, rec.Version + 1000, 2} {
		hinter.Send(entry.Hint, lock.Hint{LockID: "x", Owner: entry.Owner, Enqueued: entry.Enqueued, Kind: lock.HintFree,
			Token: rec.Token + int64(i%2), Version: version})
		time.Sleep(4 * time.Second) // one hint a budget refill (four waiter polls)
	}
	writes := counted.reset()
	select {
	case <-granted:
		t.Fatal("the head was granted the held lock on a forged hint")
	default:
	}
	if got, _ := mem.Record("x"); got.Owner != rec.Owner || got.Token != rec.Token {
		t.Fatalf("record after the forged hints: %+v, want the holder's grant unchanged", got)
	}
	cancel()
	<-done
	return writes
}

// dequeueCounter is a countingStore that counts queue removals too.
type dequeueCounter struct{ countingStore }

func (s *dequeueCounter) Dequeue(ctx context.Context, lockID string, e lock.QueueEntry) error {
	s.count("dequeue")
	return s.Store.Dequeue(ctx, lockID, e)
}

// hintedHandOff releases the lock to a hinted head whose lightweight transactions are slow while a
// Try-mode newcomer asks for it every millisecond from the release on, starting at an offset that
// varies with cycle. It returns 1 when
// the newcomer was granted ahead of the head, and how many times the newcomer asked.
func hintedHandOff(t *testing.T, cycle int, headOpts ...lock.Option) (overtaken, tries int) {
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hinter := localhint.New()
	opts := []lock.Option{lock.WithLease(3 * time.Second), lock.WithHinter(hinter)}
	newLocker := func(i int, f memstore.Faults, more ...lock.Option) *lock.Locker {
		l, err := lock.New(mem.Client(uint64(cycle*10+i+1), f), lock.Owner{Identity: fmt.Sprintf("c%d", i), Incarnation: "1"}, append(opts, more...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	holder := newLocker(0, fastFaults)
	held, err := holder.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	head := newLocker(1, slowLWTFaults, headOpts...)
	granted, done := grantTime(ctx, t, head, "x")
	waitQueued(t, mem, 1)
	time.Sleep(1500 * time.Millisecond) // the head has read the queue and knows it is the head

	newcomer := newLocker(2, fastFaults)
	var newcomerFirst atomic.Bool
	headGranted, newcomerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(newcomerDone)
		time.Sleep(time.Duration(cycle%6) * 500 * time.Microsecond)
		for {
			select {
			case <-headGranted:
				return
			default:
			}
			tries++
			l, err := newcomer.TryAcquire(ctx, "x")
			if err == nil {
				select {
				case <-headGranted:
				default:
					newcomerFirst.Store(true)
				}
				_ = l.Release(context.Background())
				return
			}
			if !errors.Is(err, lock.ErrLocked) {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-granted
	close(headGranted)
	<-newcomerDone
	cancel()
	<-done
	time.Sleep(time.Second) // background removals end
	if newcomerFirst.Load() {
		return 1, tries
	}
	return 0, tries
}
