package lock

import (
	"context"
	"fmt"
	"time"
)

// Acquire, "A dead head" (docs/design.md): the waiter next in line watches the head.

// A head that died (or hangs) leaves the lock to nobody until its queue entry's TTL runs out: a
// release tells it, and waiters behind it wait. So the waiter next in line watches the head once it
// has been the head for deadHeadAfter: every other poll not triggered by a hint it reads the owner
// record instead of the queue (its store load stays the same). A free record that stays unchanged
// for deadHeadFree means the head is not taking it: a live head reads the record every head poll
// and grants itself at once (Lockers of one lock are assumed to share their poll settings). The
// watcher then removes the head's entry (a head that is alive after all finds its entry gone and
// writes it again under its old name, keeping its place, though others' bounded queue reads may
// miss it until their next whole read) and contends as the head. This is fairness only: the grant
// is the usual compare-and-swap on exactly the record read. With the default options
// deadHeadAfter is 2 s and deadHeadFree 1 s (4 s for a head that listens for hints, which reads
// the record at least every second, whatever its lease).
func (o options) deadHeadAfter() time.Duration { return 2 * o.waiterPoll }
func (o options) deadHeadFree(head QueueEntry) time.Duration {
	return max(o.waiterPoll, 4*o.headPollOf(head))
}

// headPollOf is at least how often the waiter of entry e reads the owner record as the head: every
// poll interval without hints; with them (an entry with a hint address) every hintedHeadPoll of
// its own lease, which the watcher does not know, so the longest a hinted head poll may be:
// MaxHintedHeadPoll (or the poll interval, if longer). Judging by the watcher's own lease, a
// watcher at a 3 s lease (head poll 200 ms) would skip the live head of a Locker at 15 s (1 s).
// Lockers of one lock are assumed to share their poll interval.
func (o options) headPollOf(e QueueEntry) time.Duration {
	if e.Hint != "" {
		return max(o.pollInterval, MaxHintedHeadPoll)
	}
	return o.pollInterval
}

// nextInLinePoll is the poll of the waiter next in line: a little sooner than others', the head
// may be granted any moment.
func (o options) nextInLinePoll() time.Duration { return max(o.pollInterval, 2*o.waiterPoll/3) }

// followHead records, after a queue read at now, the head while we are next in line.
func (a *acquisition) followHead(now time.Time, queue []QueueEntry, ahead int) {
	if ahead != 1 || !a.queued {
		a.head = QueueEntry{}
		return
	}
	self := a.l.owner.String()
	for _, e := range queue {
		if e.Owner == self {
			continue
		}
		if !e.Same(a.head) {
			a.headSince, a.grantableSince = now, time.Time{}
		}
		a.head = e // with its latest write stamp: skipHead removes it as last seen
		return
	}
}

// watchingHead reports whether we are next in line behind a head that has been the head for
// deadHeadAfter, or behind entries that have all gone unrewritten that long (quietAhead, see
// dropDead).
func (a *acquisition) watchingHead(now time.Time) bool {
	if !a.block || !a.queued || a.ahead < 1 {
		return false
	}
	return a.quietAhead || a.nextInLine() && now.Sub(a.headSince) >= a.l.opts.deadHeadAfter()
}

// nextInLine reports whether we were next in line behind a known head at our last queue read.
func (a *acquisition) nextInLine() bool { return a.ahead == 1 && a.head.Enqueued != 0 }

// watchHead reads the owner record in place of a queue read, and contends as the head when the
// head has left a grantable record untaken for deadHeadFree. A record that it returns as look
// asks the step to read the queue now, with that record (freeSeen).
func (a *acquisition) watchHead(ctx context.Context) (lease *Lease, next time.Duration, look *loaded, err error) {
	l := a.l
	nextInLine := a.restPoll(true)
	r := loaded{sent: l.opts.clock.Now()}
	r.rec, r.ok, r.err = l.load(ctx, a.lockID, false)
	if r.err != nil {
		return nil, 0, nil, fmt.Errorf("lock %s: reading owner record: %w", a.lockID, r.err)
	}
	received := l.opts.clock.Now()
	if r.ok && r.rec.Held() {
		// Start (or go on with) our observation of a held record now: if its holder is dead as
		// well, we may take it over as soon as we are the head, not a lease after (rule 3 asks
		// for the observation, not for being the head while it runs).
		l.observe(a.lockID, r.rec, received)
	}
	if !a.nextInLine() {
		return nil, a.restPoll(false), nil, nil // dropDead, not the head watch, removes entries ahead of us
	}
	if r.ok && r.rec.Held() && r.rec.Owner == a.head.Owner {
		// The head's entry is the holder's own, left behind by its grant (removing it failed): the
		// holder is not waiting, so we are the head. Remove the entry and contend as the head,
		// which observes the holder's record like any head.
		lease, next, err = a.skipHead(ctx, &r, "the queue head is the holder's leftover entry")
		return lease, next, nil, err
	}
	if r.ok && r.rec.Held() {
		// Held, by a live holder or not: the head judges that by its own observation, which may
		// have started later than ours, so only a free record the head leaves untaken counts.
		a.grantableSince = time.Time{}
		return nil, nextInLine, nil, nil
	}
	if a.grantableSince.IsZero() || !a.grantable.sameState(r.rec) {
		a.grantable, a.grantableSince = r.rec, received
		return a.freeSeen(&r, nextInLine)
	}
	if r.sent.Sub(a.grantableSince) < l.opts.deadHeadFree(a.head) {
		return a.freeSeen(&r, nextInLine)
	}
	lease, next, err = a.skipHead(ctx, &r, "the queue head leaves the lock untaken")
	return lease, next, nil, err
}

// freeSeen is watchHead's answer to a free record that the head may still take: wait for the next
// step. With hints our steps are far apart, and a free record may mean that we are the head
// already and the hint that said so was lost: then the step goes on to read the queue, with the
// record just read (look).
func (a *acquisition) freeSeen(r *loaded, wait time.Duration) (lease *Lease, next time.Duration, look *loaded, err error) {
	if a.hinted() {
		return nil, 0, r, nil
	}
	return nil, wait, nil, nil
}

// freeBehindHead is the step's answer, next in line, to a free record r read with the queue (told
// of the release by a hint, or by watchHead): it starts (or goes on with) the watch of the free
// record and returns when to look again, reading the record then: just after the head has left it
// untaken for deadHeadFree. Without it a waiter that listens for hints would look again only at
// its rest poll (10 s), and a dead head would keep the lock from everyone for up to two of them.
// ok is false for a held record, or one that could not be read.
func (a *acquisition) freeBehindHead(r loaded) (wait time.Duration, ok bool) {
	if r.err != nil || (r.ok && r.rec.Held()) {
		return 0, false
	}
	o := a.l.opts
	now := o.clock.Now()
	if a.grantableSince.IsZero() || !a.grantable.sameState(r.rec) {
		a.grantable, a.grantableSince = r.rec, now
	}
	a.recordTurn = false // the next step that no hint triggers reads the record (see step)
	// Past deadHeadFree by a tenth of it, so that the jitter of the wait (±10 %) cannot bring
	// the look before it; and never later than our usual step.
	wait = a.grantableSince.Add(o.deadHeadFree(a.head)*11/10 + o.pollInterval).Sub(now)
	return min(max(wait, o.pollInterval), a.restPoll(true)), true
}

// skipHead removes the head's entry, which is not a live waiter's, and contends as the head on the
// record r read.
func (a *acquisition) skipHead(ctx context.Context, r *loaded, why string) (*Lease, time.Duration, error) {
	l := a.l
	l.opts.log.V(1).Info(why+"; removing its entry and contending", "lock", a.lockID, "head", a.head.Owner)
	dead := a.head
	// The waiter after us is unknown (our queue view names the dead head as next): the release
	// reads the queue afresh to tell the right one.
	a.head, a.wasHead, a.ahead, a.next, a.othersSeen = QueueEntry{}, true, 0, QueueEntry{}, false
	go l.removeOther(context.WithoutCancel(ctx), a.lockID, dead, QueueEntry{})
	return a.contend(ctx, r)
}
