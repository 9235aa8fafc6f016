package lock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// queueScript is a store whose queue the test sets, whose bounded reads can be held back and whose
// whole-queue reads can fail.
type queueScript struct {
	oneRecordStore
	mu        sync.Mutex
	entries   []QueueEntry  // in queue order
	hold      chan struct{} // the next bounded read waits for it to close
	failWhole bool
	froms     []int64
}

func (s *queueScript) Queue(_ context.Context, _ string, from int64, _ int) ([]QueueEntry, error) {
	s.mu.Lock()
	s.froms = append(s.froms, from)
	var out []QueueEntry
	for _, e := range s.entries {
		if e.Enqueued >= from {
			out = append(out, e)
		}
	}
	hold, fail := s.hold, s.failWhole && from == 0
	if from != 0 {
		s.hold = nil
	}
	s.mu.Unlock()
	if hold != nil && from != 0 {
		<-hold
	}
	if fail {
		return nil, errors.New("whole read timed out")
	}
	return out, nil
}

func (s *queueScript) set(entries ...QueueEntry) {
	s.mu.Lock()
	s.entries = entries
	s.mu.Unlock()
}

func (s *queueScript) lastFrom() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.froms[len(s.froms)-1]
}

// scriptedLocker returns a Locker on a queueScript whose queue holds one entry of another owner,
// enqueued now (µs).
func scriptedLocker(t *testing.T) (*queueScript, *Locker, int64) {
	t.Helper()
	s := &queueScript{}
	l, err := New(s, Owner{Identity: "a", Incarnation: "1"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	s.set(QueueEntry{Enqueued: now, Owner: "b"})
	return s, l, now
}

func hasOwner(q []QueueEntry, owner string) bool {
	return slices.ContainsFunc(q, func(e QueueEntry) bool { return e.Owner == owner })
}

// TestQueueBoundLateBoundedRead: a bounded read sent before a whole read and answered after it
// must not move the bound back past what the whole read found (here, an entry enqueued under a
// clock 30 s behind).
func TestQueueBoundLateBoundedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, l, now := scriptedLocker(t)
		ctx := context.Background()
		if _, err := l.readQueue(ctx, "x", QueueEntry{}); err != nil { // whole: the bound is now - 250 ms
			t.Fatal(err)
		}
		skewed := QueueEntry{Enqueued: now - 30_000_000, Owner: "skewed"}
		s.set(skewed, QueueEntry{Enqueued: now, Owner: "b"})
		time.Sleep(fullQueueReadEvery - time.Millisecond)
		s.mu.Lock()
		s.hold = make(chan struct{})
		hold := s.hold
		s.mu.Unlock()
		late := make(chan struct{})
		go func() {
			defer close(late)
			if q, _ := l.readQueue(ctx, "x", QueueEntry{}); hasOwner(q, "skewed") {
				t.Error("a bounded read from after the first whole read saw the skewed entry; the test needs it not to")
			}
		}()
		synctest.Wait() // the bounded read is in flight
		time.Sleep(time.Millisecond)
		if q, _ := l.readQueue(ctx, "x", QueueEntry{}); !hasOwner(q, "skewed") || s.lastFrom() != 0 {
			t.Fatalf("the read %v after %v should have been whole and seen the skewed entry: %v", s.lastFrom(), fullQueueReadEvery, q)
		}
		close(hold)
		<-late
		if q, _ := l.readQueue(ctx, "x", QueueEntry{}); !hasOwner(q, "skewed") {
			t.Errorf("after the late bounded read answered, a read from %d misses the entry the whole read found (enqueued %d)",
				s.lastFrom(), skewed.Enqueued)
		}
	})
}

// TestQueueBoundFailedWholeRead: a whole-queue read that fails is tried again at the next read,
// not fullQueueReadEvery later.
func TestQueueBoundFailedWholeRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, l, now := scriptedLocker(t)
		ctx := context.Background()
		// Reads of another lock let the Locker prune its bounds at 0 and at fullQueueReadEvery, not
		// at the failing read (a pruned bound starts again from the start of the queue anyway).
		read := func(lockID string) ([]QueueEntry, error) { return l.readQueue(ctx, lockID, QueueEntry{}) }
		if _, err := read("y"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := read("x"); err != nil {
			t.Fatal(err)
		}
		s.set(QueueEntry{Enqueued: now - 30_000_000, Owner: "skewed"}, QueueEntry{Enqueued: now, Owner: "b"})
		time.Sleep(fullQueueReadEvery - 100*time.Millisecond)
		if _, err := read("y"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		s.mu.Lock()
		s.failWhole = true
		s.mu.Unlock()
		if _, err := read("x"); err == nil || s.lastFrom() != 0 {
			t.Fatalf("want a failing whole read, got from %d, err %v", s.lastFrom(), err)
		}
		s.mu.Lock()
		s.failWhole = false
		s.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		if q, err := read("x"); err != nil || !hasOwner(q, "skewed") {
			t.Errorf("the read after a failed whole read (from %d): %v, %v; want the whole queue again", s.lastFrom(), q, err)
		}
	})
}
