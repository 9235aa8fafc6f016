package lock

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// The queue (docs/design.md, "State" and rule 6): joining it, our position in it, and leaving it.
// Reading it from a bound is in queueread.go, removing other owners' entries in deadwaiters.go.

// queueReadLimit is how many queue entries a waiter reads to find its position.
const queueReadLimit = 1024

// enqueueTime returns a wall-clock enqueue time in microseconds that never goes backwards for this
// Locker (a non-decreasing time service, per process).
func (l *Locker) enqueueTime() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := max(l.opts.wallClock().UnixMicro(), l.lastEnqueue+1)
	l.lastEnqueue = t
	return t
}

// readQueue records a queue read received at now: who is next after us, for the hints we send when
// we leave the queue or release the lock.
func (a *acquisition) readQueue(now time.Time, queue []QueueEntry) {
	a.queueReadAt = now
	a.next, a.othersSeen = nextWaiter(queue, a.l.owner)
	a.after, _ = secondWaiter(queue, a.l.owner, a.next)
	a.before = entryAhead(queue, a.entry, a.l.owner)
}

// entryAhead returns the entry of another owner right ahead of mine in queue: the latest of those
// aheadOf counts (zero when there is none). Its waiter tells us when it leaves the queue.
func entryAhead(queue []QueueEntry, mine QueueEntry, owner Owner) QueueEntry {
	self := owner.String()
	var before QueueEntry
	for _, e := range queue {
		if e.Owner != self && (mine.Enqueued == 0 || e.Less(mine)) && (before.Enqueued == 0 || before.Less(e)) {
			before = e
		}
	}
	return before
}

func (a *acquisition) enqueue(ctx context.Context) error {
	l := a.l
	if !a.queued {
		a.entry = QueueEntry{Enqueued: l.enqueueTime(), Owner: l.owner.String(), Hint: a.hintAddr}
	}
	_, err := request(ctx, l, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.store.Enqueue(ctx, a.lockID, a.entry, l.opts.entryTTL(a.entry))
	})
	if err != nil {
		return fmt.Errorf("lock %s: joining queue: %w", a.lockID, err)
	}
	a.queued, a.enqueuedAt = true, l.opts.clock.Now()
	return nil
}

// leaveQueue removes our queue entry when an acquisition gives up, best effort: if it fails the
// entry ages out after its TTL.
func (a *acquisition) leaveQueue(ctx context.Context) {
	if !a.queued {
		return
	}
	a.queued = false
	a.l.dequeue(context.WithoutCancel(ctx), a.lockID, a.entry, a.nextAfterUs())
}

// leaveQueueInBackground removes our queue entry for a grant, in a goroutine of its own bounded by
// the request timeout, and then, with tellHead, reads the queue once and tells its first waiter
// that it is the head (dequeueTellHead), unless releasing (the lease's release has begun: it reads
// the queue and tells the head itself) is closed by then. The returned channel is closed when all
// that is done, whether or not it succeeded, so that nothing of the grant outlives its lease's
// release; at once when we were not queued.
func (a *acquisition) leaveQueueInBackground(ctx context.Context, tellHead bool, releasing <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	if !a.queued {
		close(done)
		return done
	}
	a.queued = false
	l, lockID, entry, next := a.l, a.lockID, a.entry, a.nextAfterUs()
	go func() {
		defer close(done)
		ctx := context.WithoutCancel(ctx)
		if !tellHead {
			l.dequeue(ctx, lockID, entry, QueueEntry{})
			return
		}
		l.dequeueTellHead(ctx, lockID, entry, next, releasing)
	}()
	return done
}

// dequeueTellHead removes our queue entry after a grant, then reads the queue once and tells its
// first entry of another owner that it is the head (HintAhead); stale, the next waiter of our last
// queue read, when that read fails. The head may have joined after our last read (a hinted head
// reads the queue only every rest poll, and a step woken by a release hint does not read it at
// all): told from that read alone, it would wait behind us on its rest poll, not knowing that it
// is the head, and a crash of ours would fail over up to a rest poll late
// (TestCrashFailoverUntoldHead). One queue read per grant, none at rest. When releasing is
// already closed after the removal, only stale is told: the release reads the queue and tells the
// head of the lock's free record itself.
//
// Not guaranteed: the hint may be lost, and a waiter that joins after this read is not told; a
// waiter told from stale that is not the head any more only steps once more.
func (l *Locker) dequeueTellHead(ctx context.Context, lockID string, e, stale QueueEntry, releasing <-chan struct{}) {
	l.dequeue(ctx, lockID, e, QueueEntry{})
	select {
	case <-releasing:
		l.hintAhead(lockID, stale)
		return
	default:
	}
	queue, err := l.readQueue(ctx, lockID, QueueEntry{})
	if err != nil {
		l.opts.log.V(1).Info("reading the queue after a grant failed; telling the waiter of our last read", "lock", lockID, "err", err.Error())
		l.hintAhead(lockID, stale)
		return
	}
	if head, ok := nextWaiter(queue, l.owner); ok {
		l.hintAhead(lockID, head)
	}
}

// nextAfterUs is the waiter that becomes the head when we leave the queue: the next one, when we
// were the head at our last queue read; nobody's position changes otherwise.
func (a *acquisition) nextAfterUs() QueueEntry {
	if !a.wasHead || !a.othersSeen {
		return QueueEntry{}
	}
	return a.next
}

// dequeue removes a queue entry of ours, then tells the waiter next, who is now the head, to look
// (HintAhead).
func (l *Locker) dequeue(ctx context.Context, lockID string, e, next QueueEntry) {
	if _, err := request(ctx, l, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.store.Dequeue(ctx, lockID, e)
	}); err != nil {
		l.opts.log.V(1).Info("leaving queue failed; the entry ages out", "lock", lockID, "err", err.Error())
	}
	l.hintAhead(lockID, next)
}

// aheadOf counts the entries of other owners in queue that are ahead of mine, by queue order
// whether or not mine is in the queue read (it may be being removed); without an entry of ours
// (never queued), every entry of another owner is ahead.
func aheadOf(queue []QueueEntry, mine QueueEntry, owner Owner) int {
	self := owner.String()
	ahead := 0
	for _, e := range queue {
		if e.Owner != self && (mine.Enqueued == 0 || e.Less(mine)) {
			ahead++
		}
	}
	return ahead
}

// position returns how many entries of other owners are ahead of ours (aheadOf) and whether ours
// is in the queue.
func position(queue []QueueEntry, mine QueueEntry, owner Owner) (ahead int, found bool) {
	return aheadOf(queue, mine, owner), slices.ContainsFunc(queue, mine.Same)
}
