package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Renew (docs/design.md; rules 4, 5 and 8): the renew loop and the self-fence.

// extendLocked records a successful write of rec sent at sent and, while the lease is held,
// re-arms the self-fence from the send time. A lost lease still learns the record it wrote (so it
// can give it back) but is never revived: the application was already told.
func (s *Lease) extendLocked(rec Record, sent time.Time) {
	s.rec = rec
	if s.err != nil {
		return
	}
	c := s.l.opts.clock
	if !s.validUntil.IsZero() && !c.Now().Before(s.validUntil) {
		// The deadline passed before this renewal came back, even if the fence timer has not run
		// yet (a late timer, a resumed machine): the application may have been told the lease is
		// no longer valid, so a lapsed lease is never revived.
		s.expireLocked()
		return
	}
	s.validUntil = sent.Add(s.l.opts.lease - s.l.opts.safetyMargin)
	if s.l.opts.mutations.has(mutNoSafetyMargin) {
		s.validUntil = sent.Add(s.l.opts.lease)
	}
	if s.fence != nil {
		s.fence.Stop()
	}
	left := s.validUntil.Sub(c.Now())
	if left <= 0 {
		s.expireLocked()
		return
	}
	s.fence = c.AfterFunc(left, s.checkFence)
}

// expireLocked ends a held lease as expired; the caller holds s.mu.
func (s *Lease) expireLocked() {
	s.err = ErrLeaseExpired
	s.endLocked()
	if s.fence != nil {
		s.fence.Stop()
	}
	close(s.done)
	go s.l.forget(s)
	s.l.opts.log.Info("lock lost", "lock", s.lockID, "token", s.token, "reason", ErrLeaseExpired.Error())
}

// checkFence is the self-fence (rule 4): it ends the lease when its validity ran out.
func (s *Lease) checkFence() {
	s.mu.Lock()
	left := s.validUntil.Sub(s.l.opts.clock.Now())
	if s.err == nil && left > 0 {
		s.fence = s.l.opts.clock.AfterFunc(left, s.checkFence)
	}
	s.mu.Unlock()
	if left <= 0 {
		s.lose(ErrLeaseExpired)
	}
}

// renew is the renew loop: it renews the lease until it ends, then gives the owner record back if
// it may still name us.
func (s *Lease) renew() {
	defer close(s.exited)
	o := s.l.opts
	timer := o.clock.NewTimer(o.renewInterval)
	defer timer.Stop()
	for {
		select {
		case <-s.done:
			s.release()
			return
		case <-timer.C():
			timer.Reset(s.renewOnce())
		}
	}
}

// renewOnce makes one renewal attempt (docs/design.md, Renew) and returns when to make the next.
func (s *Lease) renewOnce() time.Duration {
	o := s.l.opts
	retry := max(o.renewInterval/4, o.pollInterval)
	ctx, cancel := context.WithTimeout(context.Background(), o.requestTimeout)
	defer cancel()

	s.mu.Lock()
	rec, pending := s.rec, s.pending
	s.mu.Unlock()

	var (
		w       write
		applied bool
		cur     Record
		ok      bool
		err     error
	)
	start := o.clock.Now()
	if pending == nil {
		// 2. Rewrite the record we last wrote, remembering when the write was sent.
		next := rec
		next.Version++
		next.RenewedAt = o.wallClock()
		w = write{next: next, sent: o.clock.Now()}
		applied, cur, ok, err = s.l.cas(ctx, s.lockID, rec, next)
	} else {
		// 1. A renewal of unknown outcome is outstanding: settle it before sending anything else
		// (rule 5).
		w = *pending
		cur, ok, err = s.l.store.Load(ctx, s.lockID, true)
		applied = err == nil && ok && cur.sameState(w.next)
	}
	if err != nil && pending == nil && o.mutations.has(mutUnknownRenewalApplied) {
		err, applied = nil, true
	}
	if err != nil {
		o.observer(Event{Kind: EventRenewed, LockID: s.lockID, Took: o.clock.Since(start), Err: err})
		o.log.V(1).Info("renewal outcome unknown, will settle", "lock", s.lockID, "err", err.Error())
		s.mu.Lock()
		s.pending = &w
		s.mu.Unlock()
		return retry
	}

	s.mu.Lock()
	s.pending = nil
	if applied && o.mutations.has(mutFenceFromReceive) {
		w.sent = o.clock.Now()
	}
	if applied {
		// 3. Valid until send time + lease − margin, unless that has passed already (rule 4).
		s.extendLocked(w.next, w.sent)
		s.mu.Unlock()
		o.observer(Event{Kind: EventRenewed, LockID: s.lockID, Took: o.clock.Since(start)})
		return o.renewInterval
	}
	// 4. Not applied: still ours and unchanged (try again soon), or someone else's, or revoked.
	unchanged := ok && cur.sameState(rec)
	s.mu.Unlock()
	if unchanged {
		// Our write did not apply and never will; the record is still ours.
		o.observer(Event{Kind: EventRenewed, LockID: s.lockID, Took: o.clock.Since(start), Err: errNotApplied})
		return retry
	}
	reason := lossReason(cur, ok, s.l.owner, s.token)
	o.observer(Event{Kind: EventRenewed, LockID: s.lockID, Took: o.clock.Since(start), Err: reason})
	s.lose(reason)
	return o.renewInterval
}

// errNotApplied reports a renewal that was settled as not applied; the lease is still held.
var errNotApplied = errors.New("lock: renewal not applied; retrying")

func lossReason(cur Record, ok bool, owner Owner, token int64) error {
	if ok && cur.Revoked && cur.Token == token && cur.Owner == owner.String() {
		return ErrRevoked
	}
	if !ok {
		return fmt.Errorf("%w: the record is gone", ErrOwnershipLost)
	}
	return fmt.Errorf("%w: now owner %q token %d", ErrOwnershipLost, cur.Owner, cur.Token)
}
