package lock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// queueReadLimit is how many queue entries a waiter reads to find its position.
const queueReadLimit = 1024

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
}

// observation is what a Locker knows of a lock's owner record: the record and when it was first
// and last read in that state (Locker clock).
type observation struct {
	rec    Record
	seenAt time.Time
	lastAt time.Time
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

// observe records rec as read at receivedAt. It returns when rec was first seen unchanged, and
// current false when the read cannot be trusted to show the record: the caller must then not grant
// itself the lock on rec, and reads again.
//
// A read that returns an older-looking record than the one under observation (ordered by token,
// then version) is either stale (a replica behind an in-flight Paxos commit) or shows a record that
// was deleted and created again, or restored from a backup, with lower tokens. A stale read neither
// restarts the observation nor replaces the record, so that stale reads cannot keep a dead holder's
// lock from expiring; but the observation of one record never licenses a grant on another, which
// may have a live holder.
//
// A record counts as unchanged only while reads return the very same write (sameWrite): a record
// restored from a backup and granted again from there can reach an earlier version, owner and token
// again, never the same write. An older-looking record read more than observationLife after the
// last read that confirmed the observation replaces it: the observed record is gone for good, and
// the one read is observed from then on, for a full lease. The same write read again after any gap
// keeps its observation: records only move forward, so it was unchanged all along (a TryAcquire
// caller that asks now and then takes a dead holder's lock over once a lease has passed between
// two of its calls). What that cannot see is a backup restored while Lockers run that brings back
// the very write a Locker saw before: the README's restore procedure restarts every process.
func (l *Locker) observe(lockID string, rec Record, receivedAt time.Time) (seenAt time.Time, current bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.observed[lockID]
	if l.opts.mutations.has(mutStaleObservation) {
		// The unsafe variant: observations never void, and an older-looking read is granted on.
		if !ok || !o.rec.sameState(rec) && !rec.olderThan(o.rec) {
			o = observation{rec: rec, seenAt: receivedAt}
			l.observed[lockID] = o
		}
		return o.seenAt, true
	}
	switch {
	case ok && o.rec.sameWrite(rec):
		o.lastAt = later(o.lastAt, receivedAt)
		if o.rec.GrantedAt.IsZero() || o.rec.RenewedAt.IsZero() {
			o.rec = rec // the times a conditional write's answer lacked
		}
	case ok && rec.olderThan(o.rec) && receivedAt.Sub(o.lastAt) <= l.opts.observationLife(o.rec):
		return o.seenAt, false
	default:
		o = observation{rec: rec, seenAt: receivedAt, lastAt: receivedAt}
	}
	l.observed[lockID] = o
	return o.seenAt, true
}

// observationLife is how long an observation of rec stays valid without a read that confirms it:
// the longer of our lease and the one rec's holder promised, plus the request timeout. Replicas are
// not expected to lag further behind; a waiter reads the record far more often (docs/design.md,
// "Expiry by observation").
func (o options) observationLife(rec Record) time.Duration {
	return max(o.lease, rec.Lease) + o.requestTimeout
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// enqueueTime returns a wall-clock enqueue time in microseconds that never goes backwards for this
// Locker (a non-decreasing time service, per process).
func (l *Locker) enqueueTime() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := max(l.opts.wallClock().UnixMicro(), l.lastEnqueue+1)
	l.lastEnqueue = t
	return t
}

// jitter spreads d by ±10% so that waiters do not poll in lockstep.
func (l *Locker) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return d*9/10 + time.Duration(l.rng.Int64N(int64(d/5)+1))
}

// request runs one store call under the request timeout.
func request[T any](ctx context.Context, l *Locker, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.requestTimeout)
	defer cancel()
	return f(ctx)
}

// cas runs one conditional write under the request timeout.
func (l *Locker) cas(ctx context.Context, lockID string, prev, next Record) (applied bool, cur Record, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.requestTimeout)
	defer cancel()
	return l.store.CompareAndSwap(ctx, lockID, prev, next)
}

// load reads the owner record under the request timeout.
func (l *Locker) load(ctx context.Context, lockID string, linearizable bool) (Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.requestTimeout)
	defer cancel()
	return l.store.Load(ctx, lockID, linearizable)
}

// settle resolves a conditional write of unknown outcome with a linearizable read, retrying until
// it succeeds or ctx ends (rule 5). After it returns, the write is visible or never applies.
func (l *Locker) settle(ctx context.Context, lockID string) (Record, bool, error) {
	backoff := l.opts.pollInterval
	for {
		rec, ok, err := l.load(ctx, lockID, true)
		if err == nil {
			return rec, ok, nil
		}
		l.opts.log.V(1).Info("settling a write of unknown outcome", "lock", lockID, "err", err.Error())
		if err := l.sleep(ctx, l.jitter(backoff)); err != nil {
			return Record{}, false, fmt.Errorf("lock %s: settling a write of unknown outcome: %w", lockID, err)
		}
		backoff = min(2*backoff, l.opts.renewInterval)
	}
}

// sleep waits for d or the end of ctx.
func (l *Locker) sleep(ctx context.Context, d time.Duration) error {
	t := l.opts.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// loaded is the result of an owner-record read.
type loaded struct {
	rec  Record
	ok   bool
	err  error
	sent time.Time // Locker clock; when the read was sent
}

// acquisition is one run of Acquire or TryAcquire.
type acquisition struct {
	l      *Locker
	lockID string
	block  bool

	entry       QueueEntry
	queued      bool
	enqueuedAt  time.Time // Locker clock; when the entry was last written
	wasHead     bool      // at the last queue read nobody was ahead of us
	ahead       int       // waiters ahead of us at the last queue read; -1 before the first
	queueReadAt time.Time // Locker clock; when the queue was last read
	othersSeen  bool      // the last queue read held entries of other owners
	next        QueueEntry
	triedFirst  bool // the CAS-first attempt (casFirst) has been made or ruled out

	// Next in line, watching the head (see watchHead): the head entry and since when it has been
	// the head (Locker clock), whether the next poll reads the record instead of the queue, and
	// the grantable record last seen and since when it has been seen grantable.
	head           QueueEntry
	headSince      time.Time
	recordTurn     bool
	grantable      Record
	grantableSince time.Time

	sightings  map[queueKey]sighting // entries ahead of us by their Written stamps (dropDead)
	quietAhead bool                  // every entry ahead of us has gone unrewritten for deadHeadAfter

	hintAddr string      // where we listen for hints; written into our queue entry
	hints    <-chan Hint // hints for our queue entry
	budget   hintBudget  // how many hints we may still act on
}

// acquire is the acquire loop: it makes steps (docs/design.md, Acquire) until granted, until a
// try gives up, or until ctx ends.
func (a *acquisition) acquire(ctx context.Context) (*Lease, error) {
	l := a.l
	addr, hints, stopListening := l.opts.hinter.Listen(a.lockID, l.owner.String())
	defer stopListening()
	a.hintAddr, a.hints, a.ahead = addr, hints, -1
	a.budget = newHintBudget(l.opts.clock.Now(), l.opts.waiterPoll)
	defer a.leaveQueue(ctx)

	backoff := l.opts.pollInterval
	var hinted Hint // the hint that triggered this step; zero for a poll
	for {
		aheadBefore := a.ahead
		lease, wait, err := a.step(ctx, hinted)
		if hinted.Kind != 0 && (lease != nil || aheadBefore > 0 && a.ahead >= 0 && a.ahead < aheadBefore) {
			a.budget.refund() // the hint did its job
		}
		hinted = Hint{}
		switch {
		case lease != nil:
			return lease, nil
		case errors.Is(err, ErrLocked) || (err != nil && !a.block):
			return nil, err
		case err != nil:
			// A store error while waiting: keep waiting, backing off, until ctx ends.
			l.opts.log.V(1).Info("store error while waiting for lock", "lock", a.lockID, "err", err.Error())
			wait, backoff = backoff, min(2*backoff, l.opts.waiterPoll)
		default:
			backoff = l.opts.pollInterval
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("lock %s: %w", a.lockID, err)
		}
		if wait > 0 {
			if hinted, err = a.wait(ctx, l.jitter(wait)); err != nil {
				return nil, fmt.Errorf("lock %s: %w", a.lockID, err)
			}
		}
	}
}

// wait sleeps for d, or until a hint for our queue entry arrives that the hint budget lets us act
// on. It returns the hint, or a zero Hint when the poll came first.
func (a *acquisition) wait(ctx context.Context, d time.Duration) (Hint, error) {
	l := a.l
	t := l.opts.clock.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return Hint{}, ctx.Err()
		case <-t.C():
			return Hint{}, nil
		case h := <-a.hints:
			if !a.queued || h.LockID != a.lockID || h.Owner != a.entry.Owner || h.Enqueued != a.entry.Enqueued {
				continue // for an entry that is not waiting any more
			}
			if !a.budget.take(l.opts.clock.Now()) {
				l.opts.log.V(1).Info("hint ignored: over the hint budget", "lock", a.lockID, "kind", h.Kind.String())
				continue // the poll comes anyway
			}
			return h, nil
		}
	}
}

// step makes one attempt; hinted is the hint that triggered it (zero for a poll). It returns the
// lease when granted, or how long to wait before the next attempt. In try mode every "not now" is
// ErrLocked.
func (a *acquisition) step(ctx context.Context, hinted Hint) (*Lease, time.Duration, error) {
	l := a.l
	if !a.triedFirst {
		a.triedFirst = true
		if free, ok := l.takeFree(a.lockID); ok && !a.queued {
			if lease, wait, done, err := a.casFirst(ctx, free); done {
				return lease, wait, err
			}
		}
		if a.block && !a.queued && l.takeBusy(a.lockID) {
			// Our own release a moment ago handed the lock to a waiter: join the queue behind
			// them without reading it first. The waiter ahead of us tells us when we are next.
			return nil, l.opts.waiterPoll, a.enqueue(ctx)
		}
	}
	// A release hint (HintFree) is taken as a reason to look now, never as a fact: the step reads
	// the owner record, alongside the queue unless we were the head a moment ago, and grants
	// itself only on the record it read. A forged or stale hint so costs reads only (rule 6), and
	// our queue entry stays in place until a grant has landed, so that nobody arriving meanwhile
	// finds the queue without us (docs/design.md, Hand-off hints).
	if free, ok := hinted.freeRecord(); ok && a.queued && l.opts.mutations.has(mutCASOnHint) {
		return a.contend(ctx, &loaded{rec: free, ok: true, sent: l.opts.clock.Now()})
	}
	// 1. Keep our queue entry alive while we wait.
	if a.queued && l.opts.clock.Since(a.enqueuedAt) >= l.opts.queueEntryTTL/3 {
		if err := a.enqueue(ctx); err != nil {
			return nil, 0, err
		}
	}
	// 2. Only the head of the queue contends for ownership (fairness, rule 6). A waiter
	// that may be the head reads the owner record at the same time, saving a round trip.
	// The head re-reads the queue only once per waiter poll: only a waiter with a skewed clock or a
	// late enqueue could get ahead of it, and that is a matter of fairness, not safety.
	now := l.opts.clock.Now()
	if a.wasHead && now.Sub(a.queueReadAt) < l.opts.waiterPoll {
		return a.contend(ctx, nil)
	}
	if hinted.Kind == 0 && a.watchingHead(now) {
		if a.recordTurn = !a.recordTurn; a.recordTurn {
			return a.watchHead(ctx)
		}
	}
	var record chan loaded // the owner record, read alongside the queue
	if !a.queued || a.wasHead || hinted.Kind == HintFree {
		record = make(chan loaded, 1)
		go func() {
			r := loaded{sent: l.opts.clock.Now()}
			r.rec, r.ok, r.err = l.load(ctx, a.lockID, false)
			record <- r
		}()
	}
	queue, err := l.readQueue(ctx, a.lockID, a.entry)
	if err != nil {
		return nil, 0, fmt.Errorf("lock %s: reading queue: %w", a.lockID, err)
	}
	queue = a.dropDead(ctx, now, l.opts.clock.Now(), queue)
	a.readQueue(now, queue)
	ahead, found := position(queue, a.entry, l.owner)
	a.followHead(now, queue, ahead)
	if a.queued && !found && len(queue) >= queueReadLimit && queue[len(queue)-1].Less(a.entry) {
		// Deeper in the queue than one read reaches: our entry is there, it just was not read.
		// It is refreshed every TTL/3 like any other, not rewritten on every poll.
		found = true
	}
	a.wasHead, a.ahead = ahead == 0, ahead
	if a.block {
		l.opts.observer(Event{Kind: EventQueued, LockID: a.lockID, Ahead: ahead})
	}
	if a.queued && !found {
		// Our entry expired (we were paused longer than its TTL) or is not visible yet: rewrite it.
		a.wasHead, a.ahead = false, -1
		return nil, l.opts.pollInterval, a.enqueue(ctx)
	}
	if ahead > 0 && record != nil && l.opts.zeroWait {
		// Zero-wait restart (rule 7): the record names a dead predecessor of ours, which
		// no waiter can be granted before it has aged out for a lease. Take it over now, whatever
		// the queue says, so that leadership does not move because our process restarted.
		r := <-record
		if r.err == nil && a.ownedByUs(r.rec) {
			return a.contend(ctx, &r)
		}
		record = nil
	}
	if ahead > 0 {
		if !a.block {
			return nil, 0, fmt.Errorf("%w: %s has %d waiter(s) queued", ErrLocked, a.lockID, ahead)
		}
		if !a.queued {
			return nil, l.opts.waiterPoll, a.enqueue(ctx)
		}
		if ahead == 1 {
			// Next in line: look again a little sooner, the head may be granted any moment.
			return nil, l.opts.nextInLinePoll(), nil
		}
		return nil, l.opts.waiterPoll, nil
	}
	if hinted.Kind == HintAhead && record == nil {
		// We just became the head: the waiter ahead of us was granted moments ago and tells us
		// when it releases. Read the record at our next head poll, not now.
		return nil, l.opts.pollInterval, nil
	}
	var r *loaded
	if record != nil {
		got := <-record
		r = &got
	}
	return a.contend(ctx, r)
}

// contend is the head's part of a step: read the owner record (or take the read already made, r)
// and grant ourselves the lock when nothing blocks it.
func (a *acquisition) contend(ctx context.Context, read *loaded) (*Lease, time.Duration, error) {
	l := a.l
	// 3. Head of the queue (or the queue is empty): read the owner record. The observation clock
	// starts when the read is received, which is no earlier than the record was written.
	var r loaded
	if read != nil {
		r = *read
	} else {
		r.sent = l.opts.clock.Now()
		r.rec, r.ok, r.err = l.load(ctx, a.lockID, false)
	}
	if r.err != nil {
		return nil, 0, fmt.Errorf("lock %s: reading owner record: %w", a.lockID, r.err)
	}
	received := l.opts.clock.Now()
	seen := received
	if l.opts.mutations.has(mutObserveFromSend) {
		seen = r.sent
	}
	if wait := a.mustWait(r.rec, r.ok, seen, received); wait > 0 {
		if a.block {
			l.opts.observer(Event{Kind: EventQueued, LockID: a.lockID, Holder: r.rec.Owner, Token: r.rec.Token})
		}
		if !a.block {
			return nil, 0, fmt.Errorf("%w: %s is held by %s (token %d)", ErrLocked, a.lockID, r.rec.Owner, r.rec.Token)
		}
		if !a.queued {
			if err := a.enqueue(ctx); err != nil {
				return nil, 0, err
			}
		}
		return nil, min(wait, l.opts.pollInterval), nil
	}

	// 4. Grant ourselves the lock with a CAS conditioned on exactly the record we read.
	lease, err := a.grant(ctx, r.rec, r.ok)
	if err != nil || lease != nil {
		if lease != nil && lease.Err() != nil {
			// The grant's response came back after the lease it started had already run out (a
			// stalled store or process). Never hand out a dead lease: the record names us, so the
			// next step grants again at once with a new token and a fresh lease.
			return nil, 0, nil
		}
		return lease, 0, err
	}
	if !a.block {
		return nil, 0, fmt.Errorf("%w: %s was granted to another owner first", ErrLocked, a.lockID)
	}
	return nil, 0, nil
}

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
// deadHeadAfter is 2 s and deadHeadFree 1 s.
func (o options) deadHeadAfter() time.Duration { return 2 * o.waiterPoll }
func (o options) deadHeadFree() time.Duration  { return max(o.waiterPoll, 4*o.pollInterval) }

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
// head has left a grantable record untaken for deadHeadFree.
func (a *acquisition) watchHead(ctx context.Context) (*Lease, time.Duration, error) {
	l := a.l
	nextInLine := l.opts.nextInLinePoll()
	r := loaded{sent: l.opts.clock.Now()}
	r.rec, r.ok, r.err = l.load(ctx, a.lockID, false)
	if r.err != nil {
		return nil, 0, fmt.Errorf("lock %s: reading owner record: %w", a.lockID, r.err)
	}
	received := l.opts.clock.Now()
	if r.ok && r.rec.Held() {
		// Start (or go on with) our observation of a held record now: if its holder is dead as
		// well, we may take it over as soon as we are the head, not a lease after (rule 3 asks
		// for the observation, not for being the head while it runs).
		l.observe(a.lockID, r.rec, received)
	}
	if !a.nextInLine() {
		return nil, l.opts.waiterPoll, nil // dropDead, not the head watch, removes entries ahead of us
	}
	if r.ok && r.rec.Held() && r.rec.Owner == a.head.Owner {
		// The head's entry is the holder's own, left behind by its grant (removing it failed): the
		// holder is not waiting, so we are the head. Remove the entry and contend as the head,
		// which observes the holder's record like any head.
		return a.skipHead(ctx, &r, "the queue head is the holder's leftover entry")
	}
	if r.ok && r.rec.Held() {
		// Held, by a live holder or not: the head judges that by its own observation, which may
		// have started later than ours, so only a free record the head leaves untaken counts.
		a.grantableSince = time.Time{}
		return nil, nextInLine, nil
	}
	if a.grantableSince.IsZero() || !a.grantable.sameState(r.rec) {
		a.grantable, a.grantableSince = r.rec, received
		return nil, nextInLine, nil
	}
	if r.sent.Sub(a.grantableSince) < l.opts.deadHeadFree() {
		return nil, nextInLine, nil
	}
	return a.skipHead(ctx, &r, "the queue head leaves the lock untaken")
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

// mustWait returns how long the owner record rec, whose read was received at received (seen
// counts as its observation time), still blocks a grant; 0 means the lock may be granted now.
func (a *acquisition) mustWait(rec Record, ok bool, seen, received time.Time) time.Duration {
	l := a.l
	m := l.opts.mutations
	switch {
	case !ok:
		return 0 // never granted
	case !rec.Held():
		return 0 // released
	case a.ownedByUs(rec):
		return 0
	case m.has(mutRevokedIsFree) && rec.Revoked:
		return 0
	}
	lease := max(l.opts.lease, rec.Lease)
	if m.has(mutOwnLeaseOnly) {
		lease = l.opts.lease
	}
	if m.has(mutPeerTimestampExpiry) {
		return max(0, lease-l.opts.wallClock().Sub(rec.RenewedAt))
	}
	// Expiry by observation (rule 3): the record must stay unchanged for a full lease on our clock,
	// counted from the first read that returned it, from when that read was received.
	seenAt, current := l.observe(a.lockID, rec, seen)
	if !current {
		return l.opts.pollInterval // an older-looking read: never grant on it, read again
	}
	return max(0, lease-received.Sub(seenAt))
}

// ownedByUs reports whether rec is a grant nobody but us can be claiming, so that we may take it
// over at once with a new token: an earlier lease of this very Locker that has ended (a live one
// would have made Acquire return ErrAlreadyHeld), or, with WithZeroWaitRestart, a grant of an earlier
// incarnation of our identity, which is dead (rule 7). A revoked grant never is: taking it
// over would undo the revocation.
func (a *acquisition) ownedByUs(rec Record) bool {
	l := a.l
	switch {
	case !rec.Held() || rec.Revoked:
		return false
	case rec.Owner == l.owner.String():
		return true
	default:
		return l.predecessor(rec.Owner)
	}
}

// predecessor reports whether owner string s is an earlier incarnation of this Locker's owner that
// proved to know the same restart secret (WithZeroWaitRestart): a process that is known to be dead,
// whose grant and queue entries we may take over at once (rule 7).
func (l *Locker) predecessor(s string) bool {
	m := l.opts.mutations
	switch {
	case s == l.owner.String() || !l.owner.sameIdentity(s):
		return false
	case m.has(mutZeroWaitAnyIdentity):
		return true
	case !l.opts.zeroWait:
		return false
	case m.has(mutZeroWaitWithoutProof):
		return true
	}
	return tagOf(s) == tagOf(l.owner.String())
}

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
	if a.queued && a.l.opts.mutations.has(mutDequeueBeforeGrant) {
		<-a.leaveQueueInBackground(ctx, false)
	}
	next, sent, applied, _, _, err := a.writeGrant(ctx, prev, exists)
	if a.l.opts.mutations.has(mutDequeueBeforeGrant) && !a.queued && a.entry.Enqueued != 0 && (err != nil || !applied) {
		a.queued = true // put the entry back under its old name
		if qerr := a.enqueue(ctx); qerr != nil && err == nil {
			err = qerr
		}
	}
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
	dequeued := a.leaveQueueInBackground(ctx, true)
	lease := startLease(l, a.lockID, next, sent, dequeued, queueView{read: a.queueReadAt, othersSeen: a.othersSeen, next: a.next})
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

// rememberBusy records that a release of ours just handed lockID to a waiter (see step).
func (l *Locker) rememberBusy(lockID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy[lockID] = l.opts.clock.Now()
}

// takeBusy reports, once, whether a release of ours handed lockID to a waiter less than a waiter
// poll ago.
func (l *Locker) takeBusy(lockID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.busy[lockID]
	delete(l.busy, lockID)
	return ok && l.opts.clock.Since(at) < l.opts.waiterPoll
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

// readQueue records a queue read received at now: who is next after us, for the hints we send when
// we leave the queue or release the lock.
func (a *acquisition) readQueue(now time.Time, queue []QueueEntry) {
	a.queueReadAt = now
	a.next, a.othersSeen = nextWaiter(queue, a.l.owner)
}

// hintAhead tells the waiter of entry to, if it listens, that it may be the head now.
func (l *Locker) hintAhead(lockID string, to QueueEntry) {
	if to.Hint != "" {
		l.opts.hinter.Send(to.Hint, Hint{LockID: lockID, Owner: to.Owner, Enqueued: to.Enqueued, Kind: HintAhead})
	}
}

// hintFree tells the waiter of entry to, if it listens, that we wrote the free record free.
func (l *Locker) hintFree(lockID string, to QueueEntry, free Record) {
	if to.Hint != "" {
		l.opts.hinter.Send(to.Hint, Hint{
			LockID: lockID, Owner: to.Owner, Enqueued: to.Enqueued, Kind: HintFree,
			Token: free.Token, Version: free.Version,
		})
	}
}

func (a *acquisition) enqueue(ctx context.Context) error {
	l := a.l
	if !a.queued {
		a.entry = QueueEntry{Enqueued: l.enqueueTime(), Owner: l.owner.String(), Hint: a.hintAddr}
	}
	_, err := request(ctx, l, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.store.Enqueue(ctx, a.lockID, a.entry, l.opts.queueEntryTTL)
	})
	if err != nil {
		return fmt.Errorf("lock %s: joining queue: %w", a.lockID, err)
	}
	a.queued, a.enqueuedAt = true, l.opts.clock.Now()
	return nil
}

// leaveQueue removes our queue entry when an acquisition gives up, best effort: if it fails the
// entry ages out after its TTL.
func (a *acquisition) leaveQueue(ctx context.Context) {
	if !a.queued {
		return
	}
	a.queued = false
	a.l.dequeue(context.WithoutCancel(ctx), a.lockID, a.entry, a.nextAfterUs())
}

// leaveQueueInBackground removes our queue entry for a grant, in a goroutine of its own bounded by
// the request timeout, and then, with tellNext, tells the waiter behind us that it is the head. The
// returned channel is closed when the entry is gone (or the removal failed); at once when we were
// not queued.
func (a *acquisition) leaveQueueInBackground(ctx context.Context, tellNext bool) <-chan struct{} {
	done := make(chan struct{})
	if !a.queued {
		close(done)
		return done
	}
	a.queued = false
	l, lockID, entry, next := a.l, a.lockID, a.entry, QueueEntry{}
	if tellNext {
		next = a.nextAfterUs()
	}
	go func() {
		defer close(done)
		l.dequeue(context.WithoutCancel(ctx), lockID, entry, next)
	}()
	return done
}

// nextAfterUs is the waiter that becomes the head when we leave the queue: the next one, when we
// were the head at our last queue read; nobody's position changes otherwise.
func (a *acquisition) nextAfterUs() QueueEntry {
	if !a.wasHead || !a.othersSeen {
		return QueueEntry{}
	}
	return a.next
}

// dequeue removes a queue entry of ours, then tells the waiter next, who is now the head, to look
// (HintAhead).
func (l *Locker) dequeue(ctx context.Context, lockID string, e, next QueueEntry) {
	if _, err := request(ctx, l, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.store.Dequeue(ctx, lockID, e)
	}); err != nil {
		l.opts.log.V(1).Info("leaving queue failed; the entry ages out", "lock", lockID, "err", err.Error())
	}
	l.hintAhead(lockID, next)
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

// aheadOf counts the entries of other owners in queue that are ahead of mine, by queue order
// whether or not mine is in the queue read (it may be being removed); without an entry of ours
// (never queued), every entry of another owner is ahead.
func aheadOf(queue []QueueEntry, mine QueueEntry, owner Owner) int {
	self := owner.String()
	ahead := 0
	for _, e := range queue {
		if e.Owner != self && (mine.Enqueued == 0 || e.Less(mine)) {
			ahead++
		}
	}
	return ahead
}

// position returns how many entries of other owners are ahead of ours (aheadOf) and whether ours
// is in the queue.
func position(queue []QueueEntry, mine QueueEntry, owner Owner) (ahead int, found bool) {
	return aheadOf(queue, mine, owner), slices.ContainsFunc(queue, mine.Same)
}
