package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Lease is one grant of a lock. It renews itself in the background until it is released or lost,
// and closes Done at the latest at (send time of its last successful renewal) + lease − safety
// margin on the Locker's clock: before any other owner can be granted the lock.
//
// A Lease does not stop a paused process from acting on a lock it lost: compare Token in the
// resource you protect (fencing) so that stale holders are rejected there.
type Lease struct {
	l      *Locker
	lockID string
	token  int64
	done   chan struct{}
	exited chan struct{}
	// dequeued is closed once the acquisition's queue entry has been removed (or its removal
	// failed): the record is given back only after that.
	dequeued <-chan struct{}
	// queue is what the acquisition last read of the queue: whether others were queued (our release
	// then hands over to them, and this Locker's next acquisition must not start from the free
	// record: casFirst), and who is next, to be told when the record is given back.
	queue queueView

	mu         sync.Mutex
	rec        Record    // the last record this lease knows it wrote
	validUntil time.Time // Locker clock
	fence      clock.Timer
	err        error     // why the lease ended; nil while held
	endedAt    time.Time // Locker clock; when the lease stopped being valid (see EndedAt)
	pending    *write
	endErr     error // outcome of giving the record back
}

// write is a conditional write whose outcome is not known yet.
type write struct {
	next Record
	sent time.Time
}

// queueView is an acquisition's last read of the queue.
type queueView struct {
	read       time.Time // Locker clock; when it was read
	othersSeen bool      // it held entries of other owners
	next       QueueEntry
}

func startLease(l *Locker, lockID string, rec Record, sent time.Time, dequeued <-chan struct{}, queue queueView) *Lease {
	lease := &Lease{
		l: l, lockID: lockID, token: rec.Token, rec: rec,
		done: make(chan struct{}), exited: make(chan struct{}), dequeued: dequeued, queue: queue,
	}
	l.opts.log.Info("lock acquired", "lock", lockID, "token", rec.Token, "owner", rec.Owner)
	lease.mu.Lock()
	lease.extendLocked(rec, sent)
	lease.mu.Unlock()
	go lease.renew()
	return lease
}

// EndedAt returns when the lease stopped being valid, on the wall clock (WithWallClock): the moment
// it was released or lost, or its deadline if that came first, as when the process was paused
// past it and noticed only later. It is the zero time while the lease is held. The wall-clock
// time is derived from the Locker's monotonic clock at the call, so it is exact on this
// machine's clock whatever the pause.
func (s *Lease) EndedAt() time.Time {
	s.mu.Lock()
	end := s.endedAt
	s.mu.Unlock()
	if end.IsZero() {
		return time.Time{}
	}
	o := s.l.opts
	return o.wallClock().Add(end.Sub(o.clock.Now()))
}

// Deadline returns the self-fence deadline on the wall clock (WithWallClock): when the lease stops
// being valid unless a renewal succeeds first, counted from the send time of the last successful
// write, less the safety margin. Renewals move it forward; once the lease ended it stays where it
// was. No other owner can be granted the lock before it (docs/design.md, rules 4 and 6), also
// after a revocation; the exception is a lease that ended with ErrOwnershipLost, whose record
// already names another owner. A holder that must be sure nothing it started still acts when
// another could hold the lock stops everything by this time (baton run does).
func (s *Lease) Deadline() time.Time {
	s.mu.Lock()
	v := s.validUntil
	s.mu.Unlock()
	o := s.l.opts
	return o.wallClock().Add(v.Sub(o.clock.Now()))
}

// endLocked records when the lease stopped being valid; the caller holds s.mu.
func (s *Lease) endLocked() {
	end := s.l.opts.clock.Now()
	if !s.validUntil.IsZero() && s.validUntil.Before(end) {
		end = s.validUntil
	}
	s.endedAt = end
}

// LockID returns the ID of the lock this lease holds.
func (s *Lease) LockID() string { return s.lockID }

// Owner returns the owner that holds the lease.
func (s *Lease) Owner() Owner { return s.l.owner }

// Token returns the fencing token of this grant: strictly larger than every earlier grant's token
// of the same lock. Pass it to the protected resource with every write.
func (s *Lease) Token() int64 { return s.token }

// Done returns a channel that is closed when the lease ends: lost, revoked or released.
func (s *Lease) Done() <-chan struct{} { return s.done }

// Err returns nil while the lease is held, else why it ended (ErrLeaseExpired, ErrRevoked,
// ErrOwnershipLost or ErrReleased, compare with errors.Is).
func (s *Lease) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Remaining returns how long the lease stays valid without another successful renewal; 0 once it
// ended.
func (s *Lease) Remaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0
	}
	return max(0, s.validUntil.Sub(s.l.opts.clock.Now()))
}

// Valid reports whether the lease is still held.
func (s *Lease) Valid() bool { return s.Remaining() > 0 }

// Context returns a context that is cancelled, with the loss reason as its cause, when the lease
// ends. Run the work the lock protects under it.
func (s *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-s.done:
			cancel(s.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Fenced runs f with the lease's fencing token and a context that is cancelled, with the loss
// reason as its cause, when the lease ends: the fencing idiom for a store without multi-key
// transactions. f passes the token with every write to the resource it protects, and the resource
// must reject a token lower than the highest it has seen (in Cassandra: a conditional update
// "IF fence <= token" that also sets the fence, see cassandrastore's examples). That check, not
// this function, is what stops a holder that was paused past its lease: Fenced only makes the
// token and the lease's end easy to carry along.
//
// Fenced does not call f when the lease has already ended, and returns the loss reason. Otherwise
// it returns f's error, with the loss reason joined to it when the lease ended while f ran.
func (s *Lease) Fenced(ctx context.Context, f func(ctx context.Context, token int64) error) error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("lock %s token %d: %w", s.lockID, s.token, err)
	}
	work, cancel := s.Context(ctx)
	defer cancel()
	err := f(work, s.token)
	if lost := s.Err(); err != nil && lost != nil {
		return errors.Join(err, fmt.Errorf("lock %s token %d ended while it ran: %w", s.lockID, s.token, lost))
	}
	return err
}

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

// lose ends the lease with reason unless it already ended.
func (s *Lease) lose(reason error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = reason
	s.endLocked()
	if s.fence != nil {
		s.fence.Stop()
	}
	close(s.done)
	s.mu.Unlock()
	s.l.forget(s)
	if errors.Is(reason, ErrReleased) {
		s.l.opts.log.Info("lock released", "lock", s.lockID, "token", s.token)
	} else {
		s.l.opts.log.Info("lock lost", "lock", s.lockID, "token", s.token, "reason", reason.Error())
	}
}

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

// release is the release loop: after the lease ended it gives the owner record back, so that the
// next waiter need not wait for expiry, and tells the next waiter (HintFree). It settles an
// outstanding write first and gives up after one lease.
func (s *Lease) release() {
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
	next, others := s.queue.next, s.queue.othersSeen
	if fresh != nil {
		if r := <-fresh; r.err == nil {
			next, others = nextWaiter(r.queue, s.l.owner)
		} else if !others {
			return // whether anyone waits is unknown: no hint, and no CAS-first next time
		}
	}
	if others {
		s.l.hintFree(s.lockID, next, free)
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
