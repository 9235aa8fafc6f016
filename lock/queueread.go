package lock

import (
	"context"
	"time"
)

// Queue reads pass over what is known to be gone. Every removed queue entry leaves a tombstone
// in Cassandra that a read from the start of the queue passes over until compaction purges it
// (gc_grace_seconds after the removal at the earliest): a lock handed over 200 times a second
// leaves 12 000 of them a minute, and every read slows down with each (on one node, cycles per
// second at 2 contenders fell from 225 to 79 within 15 s, docs/benchmarks.md). So a Locker reads a
// queue from a bound: queueReadSlack before the oldest entry its last read saw, or before the time
// of that read when the queue was empty. Cassandra starts such a read at the bound.
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
}

// readQueue reads lockID's queue from the Locker's bound, or whole when the last whole read is
// fullQueueReadEvery old, and moves the bound. mine is our own entry (zero when we never queued):
// the read always reaches it.
func (l *Locker) readQueue(ctx context.Context, lockID string, mine QueueEntry) ([]QueueEntry, error) {
	sentWall, sent := l.opts.wallClock(), l.opts.clock.Now()
	l.mu.Lock()
	b, ok := l.queueBounds[lockID]
	full := !ok || sent.Sub(b.fullAt) >= fullQueueReadEvery
	from := b.from
	if full {
		from = 0
		b.fullAt = sent
		l.queueBounds[lockID] = b
	} else if mine.Enqueued != 0 {
		from = min(from, mine.Enqueued)
	}
	l.mu.Unlock()

	queue, err := request(ctx, l, func(ctx context.Context) ([]QueueEntry, error) {
		return l.store.Queue(ctx, lockID, from, queueReadLimit)
	})
	if err != nil {
		return nil, err
	}
	next := sentWall.UnixMicro()
	if len(queue) > 0 {
		next = min(next, queue[0].Enqueued)
	}
	next -= queueReadSlack.Microseconds()
	l.mu.Lock()
	b = l.queueBounds[lockID]
	if full {
		b.from = next // may move back: the whole queue was read
	} else {
		b.from = max(b.from, next)
	}
	l.queueBounds[lockID] = b
	l.mu.Unlock()
	return queue, nil
}
