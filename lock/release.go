package lock

import (
	"context"
	"errors"
	"fmt"
)

// Release (docs/design.md): the lease gives the owner record back and tells the head.

// Release stops claiming the lock at once (Done closes before Release returns) and gives the owner
// record back so that the next waiter is granted without waiting for the lease to run out. It
// returns an error when the store could not confirm the release before ctx ended; the lock is then
// freed by expiry one lease later. Releasing a lease that was already lost is not an error.
func (s *Lease) Release(ctx context.Context) error {
	s.lose(ErrReleased)
	select {
	case <-s.exited:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.endErr
	case <-ctx.Done():
		return fmt.Errorf("lock %s: release not confirmed, the lock frees itself after one lease: %w", s.lockID, ctx.Err())
	}
}

// release is the release loop: after the lease ended it gives the owner record back, so that the
// next waiter need not wait for expiry, and tells the next waiter (HintFree). It settles an
// outstanding write first and gives up after one lease.
func (s *Lease) release() {
	close(s.releasing)
	o := s.l.opts
	ctx, cancel := context.WithTimeout(context.Background(), o.lease)
	defer cancel()
	s.mu.Lock()
	rec, pending, reason := s.rec, s.pending, s.err
	s.mu.Unlock()
	if errors.Is(reason, ErrOwnershipLost) || errors.Is(reason, ErrRevoked) {
		return // the record is not ours any more
	}
	// Our queue entry goes first (it was being removed since the grant, and is normally gone
	// long before): a waiter woken by the release must not find us still ahead of it.
	select {
	case <-s.dequeued:
	case <-ctx.Done():
	}
	// Whether anyone is queued decides whether this Locker's next acquisition may start from the
	// free record we are about to write (casFirst), and who is told that it is free: read the
	// queue beside the release unless the acquisition's read is recent and showed waiters.
	type queueRead struct {
		queue []QueueEntry
		err   error
	}
	var fresh chan queueRead
	if !s.queue.othersSeen || o.clock.Since(s.queue.read) > o.waiterPoll {
		fresh = make(chan queueRead, 1)
		go func() {
			var r queueRead
			r.queue, r.err = s.l.readQueue(ctx, s.lockID, QueueEntry{})
			fresh <- r
		}()
	}
	free, freed, err := s.l.giveBack(ctx, s.lockID, rec, pending)
	if err != nil {
		s.setEndErr(err)
		return
	}
	if !freed {
		return // someone else's record now
	}
	next, after, others := s.queue.next, s.queue.after, s.queue.othersSeen
	if fresh != nil {
		if r := <-fresh; r.err == nil {
			next, others = nextWaiter(r.queue, s.l.owner)
			after, _ = secondWaiter(r.queue, s.l.owner, next)
		} else if !others {
			return // whether anyone waits is unknown: no hint, and no CAS-first next time
		}
	}
	if others {
		s.l.hintFree(s.lockID, next, free)
		if o.clock.Since(s.grantSent) >= o.deadHeadAfter() {
			// The waiter behind the head watches it once it has been the head that long
			// (docs/design.md, A dead head): told of the free record too, it looks again once a
			// live head would have taken it, and skips a dead head then rather than at its next
			// rest poll. Not after shorter holds: a hand-off chain would send one such hint per
			// hand-off, for nothing.
			s.l.hintFree(s.lockID, after, free)
		}
		s.l.rememberBusy(s.lockID)
		return
	}
	s.l.rememberFree(s.lockID, free)
}

func (s *Lease) setEndErr(err error) {
	s.mu.Lock()
	s.endErr = err
	s.mu.Unlock()
}

// giveBack writes the free record after rec, the last record of ours we know applied, so that the
// next waiter need not wait for the grant to expire. pending is a later write of ours whose outcome
// is unknown (nil when there is none): it is settled first, and so is every give-back of unknown
// outcome, until ctx ends. It returns the free record and freed true when the give-back applied;
// freed false and no error when the record is not ours any more.
func (l *Locker) giveBack(ctx context.Context, lockID string, rec Record, pending *write) (free Record, freed bool, err error) {
	for {
		if pending != nil {
			cur, ok, err := l.settle(ctx, lockID)
			if err != nil {
				return Record{}, false, err
			}
			switch {
			case ok && cur.sameState(pending.next):
				rec = pending.next
			case !(ok && cur.sameState(rec)):
				return Record{}, false, nil // someone else's record now
			}
			pending = nil
		}
		next := Record{Token: rec.Token, Version: rec.Version + 1, GrantedAt: rec.GrantedAt, RenewedAt: l.opts.wallClock()}
		applied, _, _, err := l.cas(ctx, lockID, rec, next)
		if err == nil {
			return next, applied, nil // not applied: not ours any more
		}
		pending = &write{next: next}
		if ctx.Err() != nil {
			return Record{}, false, fmt.Errorf("lock %s: giving the record back: %w", lockID, err)
		}
	}
}
