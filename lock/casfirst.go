package lock

import (
	"context"
	"fmt"
	"time"
)

// Acquire, "Starting from our own release (CAS-first)" (docs/design.md).

// casFirst is a step that starts from a free record we know of: the one this Locker's own release
// wrote when nobody was queued that we knew of (never one a hint named: see step). Instead of
// reading the record and then writing the grant, it sends the grant, conditioned on exactly that
// free record, together with a queue read: one round trip instead of two. The condition keeps it
// safe (the write applies only if nothing changed since that release: rule 1); the queue read
// keeps it fair (rule 6): if another owner is queued ahead of us, the grant is given straight back
// and we queue behind them. done is false when the guess was stale or the store failed: the
// normal step then decides, from scratch.
func (a *acquisition) casFirst(ctx context.Context, free Record) (lease *Lease, wait time.Duration, done bool, err error) {
	l := a.l
	type written struct {
		next    Record
		sent    time.Time
		applied bool
		err     error
	}
	grant := make(chan written, 1)
	go func() {
		var w written
		w.next, w.sent, w.applied, _, _, w.err = a.writeGrant(ctx, free, true)
		grant <- w
	}()
	queue, qerr := l.readQueue(ctx, a.lockID, a.entry)
	w := <-grant
	if w.err != nil || !w.applied {
		return nil, 0, false, nil
	}
	if qerr != nil {
		// Granted, but whether someone is queued is unknown: keep the grant (fairness is best
		// effort when the store fails; safety does not depend on it).
		l.opts.log.V(1).Info("queue read failed beside a granted CAS-first; keeping the grant", "lock", a.lockID, "err", qerr.Error())
		return a.grantedFirst(ctx, w.next, w.sent)
	}
	a.readQueue(l.opts.clock.Now(), queue)
	ahead := aheadOf(queue, a.entry, l.owner)
	if ahead == 0 || l.opts.mutations.has(mutBargeAhead) {
		a.wasHead, a.ahead = true, 0
		return a.grantedFirst(ctx, w.next, w.sent)
	}
	// The fairness guard: others were queued, so the grant goes straight back and we join them.
	// Nobody saw it: no lease was started, and its token is simply never used.
	l.opts.log.V(1).Info("CAS-first grant given back: others are queued", "lock", a.lockID, "ahead", ahead, "token", w.next.Token)
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.lease)
	back, freed, gerr := l.giveBack(gctx, a.lockID, w.next, nil)
	cancel()
	switch {
	case gerr != nil:
		l.opts.log.V(1).Info("giving back a CAS-first grant failed; it expires by observation", "lock", a.lockID, "err", gerr.Error())
	case freed:
		l.hintFree(a.lockID, a.next, back)
	}
	a.wasHead, a.ahead = false, ahead
	switch {
	case !a.block:
		return nil, 0, true, fmt.Errorf("%w: %s has %d waiter(s) queued", ErrLocked, a.lockID, ahead)
	case a.queued:
		return nil, l.opts.waiterPoll, true, nil
	}
	return nil, l.opts.waiterPoll, true, a.enqueue(ctx)
}

// grantedFirst is granted for casFirst, with contend's rule: a lease that ran out before its
// grant's response came back is never handed out; the record names us, so the next step grants
// again at once with a new token.
func (a *acquisition) grantedFirst(ctx context.Context, next Record, sent time.Time) (*Lease, time.Duration, bool, error) {
	lease, err := a.granted(ctx, next, sent)
	if lease != nil && lease.Err() != nil {
		return nil, 0, true, nil
	}
	return lease, 0, true, err
}

// rememberFree records the free record a release of ours wrote, when nobody else was queued as
// far as we knew: the next acquisition of the lock by this Locker may start from it (casFirst).
func (l *Locker) rememberFree(lockID string, free Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free[lockID] = free
}

// takeFree returns and forgets the free record remembered for lockID.
func (l *Locker) takeFree(lockID string) (Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, ok := l.free[lockID]
	delete(l.free, lockID)
	return rec, ok
}
