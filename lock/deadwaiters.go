package lock

import (
	"context"
	"slices"
	"time"
)

// Dead waiters. A waiter that dies (or hangs) leaves its queue entry behind until the entry's TTL
// runs out, and every waiter behind it counts it ahead meanwhile. The head of the queue is watched
// by the waiter next in line (watchHead); entries further back are not, and a restarted process has
// a new owner, so nothing else removes them early. With several dead entries ahead, the live
// waiters behind them wait out the TTL, and a caller whose wait is shorter gives up and queues
// again at the back, behind the same dead entries.
//
// So every waiter watches the entries ahead of it: a live waiter rewrites its entry every third of
// the entry's TTL, and every write changes the entry's Written stamp. An entry whose stamp stays
// the same for staleEntryAfter, on the watcher's own clock from the first read that returned it
// to the sending of a later one, belongs to a waiter that stopped refreshing it. The watcher
// leaves it out of its position at once and removes it in the background. A waiter that is alive
// after all (paused, or cut off from the store) finds its entry gone at its next queue read and
// writes it again under its old name, keeping its place. This is fairness only (rule 6): the
// grant is the usual compare-and-swap on exactly the record read.
//
// The holder may be dead too (a crash that took waiters with it), and the head must then see its
// record unchanged for a lease before taking it over. So a waiter behind entries that have all
// gone unrewritten for deadHeadAfter reads the owner record instead of the queue every other poll,
// as the waiter next in line does (watchHead; its store load stays the same), and starts its
// observation of a held record then: by the time the dead entries are gone it may be granted at
// once.

// staleEntryAfter is how long entry e ahead may keep one Written stamp before its waiter counts
// as dead. A live waiter rewrites its entry once its last write is a third of the TTL old (entryTTL:
// its mode's), at its next step, which comes within 1.1 waiter polls (jitter) without hints and
// when the rewrite is due with them (acquisition.capWait); the second waiter poll covers the
// requests. With the default options it is 5.3 s against a TTL of 10 s, and 12 s against 30 s for
// an entry with a hint address.
func (o options) staleEntryAfter(e QueueEntry) time.Duration {
	return o.entryTTL(e)/3 + 2*o.waiterPoll
}

// sighting is when an entry was first seen with its current Written stamp.
type sighting struct {
	written int64
	since   time.Time // Locker clock; when the read that first returned it came back
}

// dropDead records the Written stamps of the entries ahead of ours in queue, read from sent to
// received on the Locker's clock, and returns queue without the entries whose waiters stopped
// refreshing them; it removes those from the store in the background. Only a queued, blocking
// waiter watches: a try makes one step, and a waiter not queued yet has nothing ahead to judge.
func (a *acquisition) dropDead(ctx context.Context, sent, received time.Time, queue []QueueEntry) []QueueEntry {
	l := a.l
	if !a.block || !a.queued || l.opts.mutations.has(mutNoDeadWaiters) {
		a.sightings, a.quietAhead = nil, false
		return queue
	}
	self := l.owner.String()
	seen := make(map[queueKey]sighting, len(queue))
	live := queue[:0:0]
	var dead []int // indexes into queue
	quiet, ahead := true, 0
	for i, e := range queue {
		if e.Owner == self || !e.Less(a.entry) {
			live = append(live, e)
			continue
		}
		if e.Written == 0 {
			live = append(live, e)
			quiet, ahead = false, ahead+1
			continue
		}
		key := queueKey{e.Enqueued, e.Owner}
		s, ok := a.sightings[key]
		if !ok || s.written != e.Written {
			s = sighting{written: e.Written, since: received}
		}
		seen[key] = s
		if unchanged := sent.Sub(s.since); unchanged < l.opts.staleEntryAfter(e) {
			live = append(live, e)
			quiet, ahead = quiet && unchanged >= l.opts.deadHeadAfter(), ahead+1
			continue
		}
		l.opts.log.V(1).Info("removing the queue entry of a waiter that stopped refreshing it", "lock", a.lockID, "entry", e.Owner, "unchanged", sent.Sub(s.since).String())
		delete(seen, key)
		dead = append(dead, i)
	}
	for _, i := range dead {
		// The waiter after the dead one moves up, maybe to the head, which it learns only at its
		// next queue read: tell it now (HintAhead), unless that is us. Otherwise the waiters behind
		// it could count it, the head, as dead for leaving a free lock untaken before it knew.
		next := QueueEntry{}
		for _, e := range queue[i+1:] {
			if !slices.ContainsFunc(dead, func(j int) bool { return queue[j].Same(e) }) {
				if e.Owner != self {
					next = e
				}
				break
			}
		}
		go l.removeOther(context.WithoutCancel(ctx), a.lockID, queue[i], next)
	}
	a.sightings, a.quietAhead = seen, quiet && ahead > 0
	return live
}

// queueKey names a queue entry: its enqueue time and owner.
type queueKey struct {
	enqueued int64
	owner    string
}

// removeOther removes another owner's queue entry e, as read from the queue, whose waiter looks
// dead, then tells next (if set) that it moved up. It removes e as the write it was seen with
// (e.Written, see Store.Dequeue): a waiter that was alive after all and wrote its entry again
// keeps it, whatever the clocks of the two say.
//
// An entry without a stamp (a store that cannot report one) is left to its TTL: a removal at our
// clock could overrule the waiter's later writes.
func (l *Locker) removeOther(ctx context.Context, lockID string, e, next QueueEntry) {
	switch {
	case l.opts.mutations.has(mutRemoveAtOwnClock):
		e.Written = 0
	case e.Written == 0:
		l.opts.log.V(1).Info("not removing a queue entry whose write stamp is unknown; it ages out", "lock", lockID, "entry", e.Owner)
		l.hintAhead(lockID, next)
		return
	}
	l.dequeue(ctx, lockID, e, next)
}
