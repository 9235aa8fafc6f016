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
	// releasing is closed when the release begins: the queue entry's removal then leaves telling
	// the new head to the release (dequeueTellHead).
	releasing chan<- struct{}
	// queue is what the acquisition last read of the queue: whether others were queued (our release
	// then hands over to them, and this Locker's next acquisition must not start from the free
	// record: casFirst), and who is next, to be told when the record is given back.
	queue queueView
	// grantSent is when the granting write was sent (Locker clock).
	grantSent time.Time

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
	after      QueueEntry // the waiter behind next
}

func startLease(l *Locker, lockID string, rec Record, sent time.Time, dequeued <-chan struct{}, releasing chan<- struct{}, queue queueView) *Lease {
	lease := &Lease{
		l: l, lockID: lockID, token: rec.Token, rec: rec,
		done: make(chan struct{}), exited: make(chan struct{}), dequeued: dequeued, releasing: releasing, queue: queue,
		grantSent: sent,
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
// was. No other owner can be granted the lock before it (docs/design.md, rules 3, 4 and 8), also
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
