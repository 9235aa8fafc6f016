package lock

import (
	"context"
	"fmt"
	"time"
)

// Acquire, steps 4 and 5 (docs/design.md; rules 1, 2 and 5): the grant, a compare-and-swap
// conditioned on exactly the record read, and the queue entry removed after it has landed.

// FirstToken is the fencing token of the first grant of a new owner record created at wall-clock
// time wall: its Unix time in microseconds (at least 1). Tokens grow by one per grant and a grant
// takes far longer than a microsecond, so a record that was deleted and created again (a truncated
// table, a re-created keyspace) still starts above every token the old record issued, as long as
// the creating machine's wall clock is not behind the old record's creator by more than the old
// record's lifetime.
func FirstToken(wall time.Time) int64 { return max(1, wall.UnixMicro()) }

// grant writes this owner into the owner record with the next token. It returns nil, nil when
// another writer won the race.
func (a *acquisition) grant(ctx context.Context, prev Record, exists bool) (*Lease, error) {
	if a.l.opts.mutations.has(mutDequeueBeforeGrant) {
		return a.grantDequeuedFirst(ctx, prev, exists)
	}
	next, sent, applied, _, _, err := a.writeGrant(ctx, prev, exists)
	if err != nil || !applied {
		return nil, err
	}
	return a.granted(ctx, next, sent)
}

// writeGrant is the conditional write of a grant on prev, its outcome settled when unknown. It
// returns the record it wrote and when it sent it; when it did not apply, the record found
// instead (ok false when there is none).
func (a *acquisition) writeGrant(ctx context.Context, prev Record, exists bool) (next Record, sent time.Time, applied bool, cur Record, ok bool, err error) {
	l := a.l
	wall := l.opts.wallClock()
	next = Record{
		Owner: l.owner.String(), Token: prev.Token + 1, Version: prev.Version + 1,
		Lease: l.opts.lease, GrantedAt: wall, RenewedAt: wall,
	}
	if !exists {
		prev = Record{}
		next.Token, next.Version = FirstToken(wall), 1
	} else if l.opts.mutations.has(mutTokenNotBumped) {
		next.Token = prev.Token
	}
	sent = l.opts.clock.Now()
	applied, cur, ok, err = l.cas(ctx, a.lockID, prev, next)
	if l.opts.mutations.has(mutFenceFromReceive) {
		sent = l.opts.clock.Now()
	}
	if err != nil {
		l.opts.log.V(1).Info("grant outcome unknown, settling", "lock", a.lockID, "err", err.Error())
		// Settle even when our caller gave up (its context ending is the usual reason for an
		// unknown outcome): a grant that applied unseen would block everyone for a lease.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.lease)
		var serr error
		cur, ok, serr = l.settle(sctx, a.lockID)
		cancel()
		if serr != nil {
			// We may hold the record without knowing it; nobody claims it, and it expires by
			// observation after one lease.
			return next, sent, false, Record{}, false, serr
		}
		applied = ok && cur.sameState(next)
	}
	if !applied && ok {
		l.observe(a.lockID, cur, l.opts.clock.Now())
	}
	return next, sent, applied, cur, ok, nil
}

// granted turns a grant that applied (next, sent at sent) into the caller's lease.
func (a *acquisition) granted(ctx context.Context, next Record, sent time.Time) (*Lease, error) {
	l := a.l
	l.mu.Lock()
	delete(l.observed, a.lockID)
	l.mu.Unlock()
	// The grant is the owner record alone; our queue entry only tells later arrivals that we are
	// ahead of them, so it is removed after the grant has landed (never before: a newcomer would
	// find the queue without us and the lock free), in the background, off the critical path. The
	// lease waits for the removal before it gives the record back, so that the next waiter does
	// not find us still ahead of it then.
	releasing := make(chan struct{})
	dequeued := a.leaveQueueInBackground(ctx, true, releasing)
	lease := startLease(l, a.lockID, next, sent, dequeued, releasing, queueView{read: a.queueReadAt, othersSeen: a.othersSeen, next: a.next, after: a.after})
	if err := ctx.Err(); err != nil {
		// Granted, but our caller is gone: give the record back at once rather than leave a grant
		// that nobody renews or releases to block the lock for a lease.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.lease)
		defer cancel()
		if rerr := lease.Release(rctx); rerr != nil {
			l.opts.log.V(1).Info("giving back a grant whose caller had gone", "lock", a.lockID, "err", rerr.Error())
		}
		return nil, fmt.Errorf("lock %s: %w", a.lockID, err)
	}
	return lease, nil
}
