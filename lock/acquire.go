package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Acquire, steps 1 to 3 (docs/design.md): the acquire loop, the wait for a poll or a hint, and
// one step: keep the queue entry alive, find our place, and contend as the head. Step 3's expiry
// by observation is in observe.go, steps 4 and 5 (the grant) in grant.go.

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
	after       QueueEntry // the waiter behind next, who watches it (see Lease.release)
	triedFirst  bool       // the CAS-first attempt (casFirst) has been made or ruled out

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
	fallback bool        // a hint went missing: keep to the unhinted schedule (hintfallback.go)
	polled   bool        // the current step was not triggered by a hint
	sawHeld  bool        // as the head, our last record read found it held

	watchHinted QueueEntry // the head for which we acted on a release hint outside the budget (wait)

	// The hint path watch (hintprobe.go): the entry right ahead of ours at the last queue read,
	// where our last probe went, when, whether it is still unanswered, and whether hints may not
	// reach us (we step as without hints behind the head).
	before    QueueEntry
	probeAddr string
	probeSent time.Time
	probeOut  bool
	deaf      bool
}

// acquire is the acquire loop: it makes steps (docs/design.md, Acquire) until granted, until a
// try gives up, or until ctx ends.
func (a *acquisition) acquire(ctx context.Context) (*Lease, error) {
	l := a.l
	addr, hints, stopListening := l.opts.hinter.Listen(a.lockID, l.owner.String())
	defer stopListening()
	a.hintAddr, a.hints, a.ahead = addr, hints, -1
	a.budget = newHintBudget(l.opts.clock.Now(), l.opts.waiterPoll)
	a.fallback = a.listening() && l.hintsMissed()
	defer a.leaveQueue(ctx)

	backoff := l.opts.pollInterval
	var hinted Hint // the hint that triggered this step; zero for a poll
	for {
		aheadBefore := a.ahead
		lease, wait, err := a.step(ctx, hinted)
		if hinted.Kind != 0 && (lease != nil || movedUp(aheadBefore, a.ahead)) {
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
			wait = a.capWait(l.jitter(wait))
		}
		a.probeAfterStep()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("lock %s: %w", a.lockID, err)
		}
		if wait > 0 {
			if hinted, err = a.wait(ctx, wait); err != nil {
				return nil, fmt.Errorf("lock %s: %w", a.lockID, err)
			}
		}
	}
}

// movedUp reports whether a step moved us up the queue: from before waiters ahead of us to after
// (-1: not known). Learning that we are the head when our place was not known (we joined the queue
// without reading it, behind a hand-off of our own: takeBusy) counts, once: the next step knows.
func movedUp(before, after int) bool {
	return after >= 0 && (before > 0 && after < before || before < 0 && after == 0)
}

// The poll schedule (docs/design.md, "The poll schedule"): without hints every waiter
// polls, the head every poll interval, the others every waiter poll. An acquisition that listens
// for hints (it has a hint address in its queue entry) is woken by them, and polls only as a safety
// net: the head reads the owner record every hintedHeadPoll, the waiters behind it step every
// hintedRestPoll, when their entries are due for a rewrite. Hints and polls only decide when a
// step is taken, never what it may do.

// listening reports whether this acquisition listens for hints (it has a hint address in its
// queue entry).
func (a *acquisition) listening() bool { return a.hintAddr != "" }

// hinted reports whether this acquisition keeps to the hinted schedule: it listens for hints, and
// none has gone missing lately (hintfallback.go).
func (a *acquisition) hinted() bool { return a.listening() && !a.fallback }

// headPoll is how long the head waits between reads of the owner record while nothing tells it of
// a release.
func (a *acquisition) headPoll() time.Duration {
	if a.hinted() {
		return a.l.opts.hintedHeadPoll()
	}
	return a.l.opts.pollInterval
}

// restPoll is how long a waiter behind the head waits between steps; nextInLine for the waiter
// right behind it. A deaf waiter (hintprobe.go) polls as without hints.
func (a *acquisition) restPoll(nextInLine bool) time.Duration {
	switch {
	case a.hinted() && !a.deaf:
		return a.l.opts.hintedRestPoll(a.entry)
	case nextInLine:
		return a.l.opts.nextInLinePoll()
	default:
		return a.l.opts.waiterPoll
	}
}

// headQueuePoll is how long the head goes without reading the queue (only a waiter with a skewed
// clock or a late enqueue could get ahead of it: fairness, not safety).
func (a *acquisition) headQueuePoll() time.Duration {
	if a.hinted() {
		return a.l.opts.hintedRestPoll(a.entry)
	}
	return a.l.opts.waiterPoll
}

// rewriteEarly is how much earlier than a third of its TTL a step rewrites our queue entry: a head
// that listens for hints rewrites it at the last head poll before it is due, so that the rewrite
// costs no step of its own (capWait would add one).
func (a *acquisition) rewriteEarly() time.Duration {
	if !a.hinted() || !a.wasHead {
		return 0
	}
	return a.headPoll() + a.headPoll()/5
}

// capWait returns d, or less when our queue entry is due for its rewrite earlier: a waiter that
// listens for hints steps rarely, and its entry's rewrite may not wait for the next step, or the
// waiters behind it would count it dead (staleEntryAfter). A waiter behind the head whose rewrite
// falls due less than a fifth of d after d waits for the rewrite instead, so that one step makes
// both (its rest poll and the rewrite share a period, and jitter would split them). Without hints
// steps come every waiter poll at most, and d is returned as it is.
func (a *acquisition) capWait(d time.Duration) time.Duration {
	if !a.hinted() || !a.queued {
		return d
	}
	due := max(0, a.l.opts.entryTTL(a.entry)/3-a.l.opts.clock.Since(a.enqueuedAt))
	if a.ahead > 0 && due <= d+d/5 {
		return due
	}
	return min(d, due)
}

// wait sleeps for d, or until a hint for our queue entry arrives that the hint budget lets us act
// on, or until the hint path watch finds that hints may not reach us (hintprobe.go). It returns
// the hint, or a zero Hint when the poll came first. Echoes of our probes end no wait. A hint that
// is ready together with the poll's or the probe's timer wins (pendingHint): select would pick at
// random, and a poll that finds what the hint said counts the hint as missed.
func (a *acquisition) wait(ctx context.Context, d time.Duration) (Hint, error) {
	l := a.l
	t := l.opts.clock.NewTimer(d)
	defer t.Stop()
	for {
		// A probe event already due is handled here, not by a timer of no duration, which would be
		// ready together with a pending hint and let select pick either (a simulated history
		// would not replay).
		if now := l.opts.clock.Now(); a.probeEventDue(now) {
			if h, act, pending := a.pendingHint(); pending {
				if act {
					return h, nil
				}
				continue
			}
			if a.probeDue(now) {
				return Hint{}, nil // deaf now: step as without hints
			}
			continue
		}
		probe, stopProbe := a.probeTimer()
		select {
		case <-ctx.Done():
			stopProbe()
			return Hint{}, ctx.Err()
		case <-t.C():
			stopProbe()
			for {
				h, act, pending := a.pendingHint()
				if !pending || act {
					return h, nil // a zero Hint: the poll
				}
			}
		case <-probe:
			stopProbe()
			continue // handled at the top of the loop, after any hint that is ready
		case h := <-a.hints:
			stopProbe()
			if a.onHint(h) {
				return h, nil
			}
		}
	}
}

// pendingHint takes a hint that is ready on our channel without waiting: pending is false when
// none is; act reports whether the step should be taken for it (onHint).
func (a *acquisition) pendingHint() (h Hint, act, pending bool) {
	select {
	case h := <-a.hints:
		if a.onHint(h) {
			return h, true, true
		}
		return Hint{}, false, true
	default:
		return Hint{}, false, false
	}
}

// onHint takes in a hint that arrived while we wait, and reports whether a step should be taken
// for it now: not for an entry that is not ours, not for an echo or a probe, not over the budget.
func (a *acquisition) onHint(h Hint) bool {
	l := a.l
	if !a.queued || h.LockID != a.lockID || h.Owner != a.entry.Owner || h.Enqueued != a.entry.Enqueued {
		return false // for an entry that is not waiting any more
	}
	l.hintArrived()
	a.fallback = false
	a.heard()
	if h.Kind == HintEcho || h.Kind == HintProbe {
		return false // hints reach us; nothing to look at
	}
	if h.Kind == HintAhead && a.ahead == 0 {
		// Told that we are the head, which our last queue read showed: a new holder tells the
		// head of its fresh queue read (dequeueTellHead), which mostly knows already. Nothing to
		// look at, and no token of the budget spent on it.
		return false
	}
	if h.Kind == HintFree && a.nextInLine() && !a.watchHinted.Same(a.head) {
		// Told of a release as the waiter behind the head, to watch a head that may be
		// dead (Lease.release). One such step per head comes apart from the budget, so
		// that these hints, which rarely make progress, do not use up the tokens of the
		// hints that do; forged ones cost one step per head at most.
		a.watchHinted = a.head
		return true
	}
	if !a.budget.take(l.opts.clock.Now()) {
		l.opts.log.V(1).Info("hint ignored: over the hint budget", "lock", a.lockID, "kind", h.Kind.String())
		return false // the poll comes anyway
	}
	return true
}

// step makes one attempt; hinted is the hint that triggered it (zero for a poll). It returns the
// lease when granted, or how long to wait before the next attempt. In try mode every "not now" is
// ErrLocked.
func (a *acquisition) step(ctx context.Context, hinted Hint) (*Lease, time.Duration, error) {
	l := a.l
	a.polled = hinted.Kind == 0
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
	if a.queued && l.opts.clock.Since(a.enqueuedAt) >= l.opts.entryTTL(a.entry)/3-a.rewriteEarly() {
		if err := a.enqueue(ctx); err != nil {
			return nil, 0, err
		}
	}
	// 2. Only the head of the queue contends for ownership (fairness, rule 6). A waiter
	// that may be the head reads the owner record at the same time, saving a round trip.
	// The head re-reads the queue only once per headQueuePoll: only a waiter with a skewed clock or
	// a late enqueue could get ahead of it, and that is a matter of fairness, not safety.
	now := l.opts.clock.Now()
	if a.wasHead && now.Sub(a.queueReadAt) < a.headQueuePoll() {
		return a.contend(ctx, nil)
	}
	var record chan loaded // the owner record, read alongside the queue
	if hinted.Kind == 0 && a.watchingHead(now) {
		if a.recordTurn = !a.recordTurn; a.recordTurn {
			lease, wait, look, err := a.watchHead(ctx)
			if look == nil {
				return lease, wait, err
			}
			record = make(chan loaded, 1)
			record <- *look
		}
	}
	if record == nil && (!a.queued || a.wasHead || hinted.Kind == HintFree) {
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
	if a.polled && found && ahead == 0 && a.ahead > 0 {
		a.missed("ahead") // the waiter ahead of us left, and its hint did not come
	}
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
		if record != nil && a.nextInLine() {
			if wait, ok := a.freeBehindHead(<-record); ok {
				return nil, wait, nil
			}
		}
		// Next in line: without hints look again a little sooner, the head may be granted any
		// moment; with hints its departure tells us.
		return nil, a.restPoll(ahead == 1), nil
	}
	// We may be the head now (a HintAhead, or a poll): read the record at once, not a head poll
	// later. The waiter ahead of us was most likely granted moments ago, and a lease of observation
	// of its grant starts only at our first read of it: read a head poll late, a crash of the new
	// holder would fail over a head poll late too (TestCrashFailoverUntoldHead). One read per
	// hand-off, none at rest.
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
	if a.polled && a.sawHeld && r.ok && !r.rec.Held() {
		a.missed("free") // the holder gave the lock back, and its hint did not come
	}
	a.sawHeld = r.ok && r.rec.Held()
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
		// Read again at the next head poll, or when the observation of a lease ends if that is
		// sooner: a crashed holder's lock is taken over a lease after the first sighting of its
		// last write, not a head poll later.
		return nil, min(wait, a.headPoll()), nil
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
