package lock

import (
	"context"
	"slices"
	"time"
)

// Queue reads pass over what is known to be gone. Every removed queue entry leaves a tombstone
// in Cassandra that a read from the start of the queue passes over until compaction purges it
// (gc_grace_seconds after the removal at the earliest): a lock handed over 200 times a second
// leaves 12 000 of them a minute, and every read slows down with each (docs/design.md, "Reading
// the queue from a bound"). So a Locker reads a queue from a bound: queueReadSlack before the
// earlier of the oldest entry its last read saw and the time that read was sent. Cassandra starts
// such a read at the bound.
//
// A bounded read misses an entry only when the entry's enqueue time lies before the bound: a write
// that took longer than queueReadSlack to land, a waiter whose wall clock runs more than
// queueReadSlack behind ours, or an entry that expired and was rewritten under its old time. The
// queue decides fairness, never safety (docs/design.md): such a waiter is not counted ahead by
// others for a while, and it sees everyone else behind it. At least every fullQueueReadEvery a
// Locker reads the whole queue of a lock again, and its bound moves back to what that read saw.
const (
	queueReadSlack     = 250 * time.Millisecond
	fullQueueReadEvery = 5 * time.Second
)

// queueBound is where a Locker's next read of one lock's queue starts.
type queueBound struct {
	from   int64     // enqueue time (µs since the epoch) that bounded reads start at
	fullAt time.Time // when the last read of the whole queue was sent, on the Locker's clock
	// whole numbers the last whole-queue read sent (Locker.wholeReads): a read moves the bound
	// only if no whole read was sent after it, so that a bounded read answering late cannot undo
	// what a whole read found.
	whole uint64
}

// readQueue reads lockID's queue from the Locker's bound, or whole when the last whole read is
// fullQueueReadEvery old, and moves the bound. mine is our own entry (zero when we never queued):
// the read always reaches it.
func (l *Locker) readQueue(ctx context.Context, lockID string, mine QueueEntry) ([]QueueEntry, error) {
	sentWall, sent := l.opts.wallClock(), l.opts.clock.Now()
	l.mu.Lock()
	l.pruneQueueBoundsLocked(sent)
	b, ok := l.queueBounds[lockID]
	full := !ok || sent.Sub(b.fullAt) >= fullQueueReadEvery && !l.opts.mutations.has(mutNoWholeQueueReads)
	from, prevFullAt := b.from, b.fullAt
	if full {
		from = 0
		l.wholeReads++
		b.fullAt, b.whole = sent, l.wholeReads
		l.queueBounds[lockID] = b
	} else if mine.Enqueued != 0 {
		from = min(from, mine.Enqueued)
	}
	gen := b.whole
	l.mu.Unlock()

	queue, err := request(ctx, l, func(ctx context.Context) ([]QueueEntry, error) {
		return l.store.Queue(ctx, lockID, from, queueReadLimit)
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok = l.queueBounds[lockID]
	if !ok || b.whole != gen {
		return queue, err // a later whole read decides the bound
	}
	if err != nil {
		if full {
			b.fullAt = prevFullAt // the next read tries the whole queue again
			l.queueBounds[lockID] = b
		}
		return nil, err
	}
	queue = l.dropPredecessors(lockID, queue)
	next := sentWall.UnixMicro()
	if len(queue) > 0 {
		next = min(next, queue[0].Enqueued)
	}
	next -= queueReadSlack.Microseconds()
	if full {
		b.from = next // may move back: the whole queue was read
	} else {
		b.from = max(b.from, next)
	}
	l.queueBounds[lockID] = b
	return queue, nil
}

// pruneQueueBoundsLocked forgets, at most once per fullQueueReadEvery, the bounds of locks whose
// next read would be whole anyway, so that a Locker that touched many locks does not keep them all.
func (l *Locker) pruneQueueBoundsLocked(now time.Time) {
	if now.Sub(l.boundsPrunedAt) < fullQueueReadEvery || l.opts.mutations.has(mutNoWholeQueueReads) {
		return
	}
	l.boundsPrunedAt = now
	for id, b := range l.queueBounds {
		if now.Sub(b.fullAt) >= fullQueueReadEvery {
			delete(l.queueBounds, id)
		}
	}
}

// dropPredecessors leaves out of queue the entries of earlier incarnations of our own identity and
// removes them from the store in the background. With WithZeroWaitRestart such an incarnation is
// known to be dead (rule 7), so a restarted process neither waits behind its own dead entry until
// the entry's TTL runs out nor counts it ahead; other waiters stop counting it once it is removed.
// Without WithZeroWaitRestart queue is returned as it is.
func (l *Locker) dropPredecessors(lockID string, queue []QueueEntry) []QueueEntry {
	if !l.opts.zeroWait {
		return queue
	}
	dead := func(e QueueEntry) bool { return l.predecessor(e.Owner) }
	if !slices.ContainsFunc(queue, dead) {
		return queue
	}
	var live []QueueEntry
	for _, e := range queue {
		if !dead(e) {
			live = append(live, e)
			continue
		}
		l.opts.log.V(1).Info("removing the queue entry of an earlier incarnation of this owner", "lock", lockID, "entry", e.Owner)
		go l.removeOther(context.Background(), lockID, e, QueueEntry{})
	}
	return live
}
