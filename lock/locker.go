package lock

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// The Locker: what it keeps per lock, and Acquire and TryAcquire, which run an acquisition
// (acquire.go). docs/design.md, "Code map", names the file of each part of the algorithm.

// Locker acquires locks for one owner. It is safe for concurrent use; each lock ID can be held at
// most once per Locker at a time.
type Locker struct {
	store Store
	owner Owner
	opts  options

	mu             sync.Mutex
	rng            *rand.Rand
	held           map[string]*Lease // lock ID → live lease; nil while an acquisition is running
	observed       map[string]observation
	free           map[string]Record     // lock ID → the free record our last release wrote (see casFirst)
	busy           map[string]time.Time  // lock ID → when our last release handed it to a waiter
	queueBounds    map[string]queueBound // see readQueue
	boundsPrunedAt time.Time
	wholeReads     uint64
	lastEnqueue    int64
	hintMissedAt   time.Time // Locker clock; when a step last found that a hint was lost (hintfallback.go)
}

// New returns a Locker for owner on store. It validates the options before anything starts.
func New(store Store, owner Owner, opts ...Option) (*Locker, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidOption)
	}
	if err := owner.Validate(); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.zeroWait {
		// The restart proof travels in the incarnation (see WithZeroWaitRestart).
		if strings.Contains(owner.Incarnation, restartTagSep) {
			return nil, fmt.Errorf("%w: with WithZeroWaitRestart the owner incarnation %q must not contain %q", ErrInvalidOption, owner.Incarnation, restartTagSep)
		}
		owner.Incarnation += restartTagSep + restartTag(owner.Identity, o.restartSecret)
		if err := owner.Validate(); err != nil {
			return nil, fmt.Errorf("%w: with WithZeroWaitRestart: %w", ErrInvalidOption, err)
		}
	}
	h := fnv.New64a()
	h.Write([]byte(owner.String()))
	seed := h.Sum64()
	return &Locker{
		store:    store,
		owner:    owner,
		opts:     o,
		rng:      rand.New(rand.NewPCG(seed, seed>>1|1)),
		held:     make(map[string]*Lease),
		observed: make(map[string]observation),
		free:     make(map[string]Record),
		busy:     make(map[string]time.Time),

		queueBounds: make(map[string]queueBound),
	}, nil
}

// Owner returns the owner this Locker acquires for.
func (l *Locker) Owner() Owner { return l.owner }

// LeaseDuration returns the lease duration this Locker grants itself.
func (l *Locker) LeaseDuration() time.Duration { return l.opts.lease }

// Acquire blocks until it holds lockID or ctx ends (a mandatory lock). It joins the lock's queue
// and only contends for ownership once it is at the head, so waiters are served in arrival order.
func (l *Locker) Acquire(ctx context.Context, lockID string) (*Lease, error) {
	return l.acquire(ctx, lockID, true)
}

// TryAcquire makes one attempt and returns ErrLocked when the lock is held by another owner or
// others are queued ahead (a soft lock). A holder that stopped renewing is taken over
// only once this Locker has seen its record unchanged for a full lease across calls.
func (l *Locker) TryAcquire(ctx context.Context, lockID string) (*Lease, error) {
	return l.acquire(ctx, lockID, false)
}

func (l *Locker) acquire(ctx context.Context, lockID string, block bool) (*Lease, error) {
	if err := ValidateLockID(lockID); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if _, busy := l.held[lockID]; busy {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrAlreadyHeld, lockID)
	}
	l.held[lockID] = nil
	l.mu.Unlock()

	a := &acquisition{l: l, lockID: lockID, block: block}
	lease, err := a.acquire(ctx)

	l.mu.Lock()
	if lease != nil && lease.Err() == nil {
		l.held[lockID] = lease
	} else if l.held[lockID] == nil {
		delete(l.held, lockID)
	}
	l.mu.Unlock()
	return lease, err
}

// forget drops a lease that ended from the Locker's table.
func (l *Locker) forget(lease *Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[lease.lockID] == lease {
		delete(l.held, lease.lockID)
	}
}
