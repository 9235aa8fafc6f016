package lock

import "time"

// HintKind says what changed for the waiter a hint is sent to.
type HintKind uint8

const (
	// HintAhead tells a waiter that the entry ahead of it left the queue: it may be the head now.
	HintAhead HintKind = iota + 1
	// HintFree tells the head of the queue that the owner record was given back: it may be granted
	// now.
	HintFree
	// HintProbe asks the Hinter it is sent to for a HintEcho of the same fields, back to the
	// waiter that sent it (named by LockID, Owner and Enqueued, its own queue entry): a waiter
	// behind the head probes the waiter ahead of it, whose hints it waits for, to learn whether
	// hints from there reach it (docs/design.md, "When hints do not arrive"). A Hinter answers
	// it itself while another waiter of that lock listens there (the prober's waiter ahead), and
	// not otherwise; it never reaches a listener.
	HintProbe
	// HintEcho is a Hinter's answer to a HintProbe, delivered to the waiter that sent the probe.
	HintEcho
)

// String returns the kind's name as it travels on the wire: "ahead", "free", "probe" or "echo".
func (k HintKind) String() string {
	switch k {
	case HintAhead:
		return "ahead"
	case HintFree:
		return "free"
	case HintProbe:
		return "probe"
	case HintEcho:
		return "echo"
	default:
		return "unknown"
	}
}

// Hint asks one waiter, named by its queue entry, to take its next step now instead of at its
// next poll.
type Hint struct {
	LockID string
	// Owner and Enqueued name the waiter's queue entry; a hint for an entry that is not waiting
	// any more is dropped.
	Owner    string
	Enqueued int64
	Kind     HintKind
	// Token and Version are, in a HintFree, those of the free record the releaser wrote (no
	// owner, no lease, not revoked): the receiver may condition its grant on that record instead
	// of reading it first. A wrong one makes the grant not apply, and its answer shows the record
	// as a read would. Zero when unknown.
	Token, Version int64
}

// freeRecord returns the free record a HintFree names, ok false when it names none.
func (h Hint) freeRecord() (Record, bool) {
	if h.Kind != HintFree || h.Version <= 0 {
		return Record{}, false
	}
	return Record{Token: h.Token, Version: h.Version}, true
}

// Hinter carries targeted hand-off hints between Lockers, in one process (internal/testing/localhint) or
// across processes (package hintudp). A waiter listens while it waits and writes its address into
// its queue entry; the waiter whose departure or release changes the head of the queue sends a
// hint to the next waiter only, instead of every waiter polling faster.
//
// A hint carries no authority: the receiver only makes its next step (a read of the queue or the
// owner record, and a conditional write if that read allows one) sooner, so a forged, duplicated or
// lost hint costs at most one step, and safety never depends on hints. Lost hints cost latency
// (the poll comes anyway); forged ones cannot add load beyond a small budget, because the Locker
// acts on at most two hints that brought no progress, plus one per four waiter polls (see
// docs/design.md, Hand-off hints).
//
// A Hinter also answers probes: a HintProbe sent to addr comes back as a HintEcho on the channel
// of the waiter that sent it while another waiter of that lock listens at addr, unless one of the
// two is lost. Probes and echoes cost no store
// request and never trigger a step: they only tell a waiter whether it can count on hints (an
// echo, or any hint for its entry, says yes; silence makes it poll as without hints). A Hinter
// that does not answer probes (an older release's) makes the waiters behind its own poll, which
// is safe.
type Hinter interface {
	// Listen registers a waiter on lockID with owner string owner until stop is called. Hints for
	// it, and echoes of its probes, arrive on the channel; addr is where other Lockers reach it,
	// written into its queue entry ("" when it cannot be reached).
	Listen(lockID, owner string) (addr string, hints <-chan Hint, stop func())
	// Send sends h to the waiter listening at addr without blocking, or a HintProbe to the Hinter
	// at addr. It may be lost.
	Send(addr string, h Hint)
}

type noHinter struct{}

func (noHinter) Listen(string, string) (string, <-chan Hint, func()) { return "", nil, func() {} }
func (noHinter) Send(string, Hint)                                   {}

// hintBudget limits the steps that hints trigger for one waiter: a token bucket of hintBurst
// steps that refills by one every hintRefillPolls waiter polls. A step that made progress (moved
// the waiter up to the head, or granted it the lock) gives its token back, so hints that do their
// job are never limited; only hints that changed nothing use the budget up.
type hintBudget struct {
	tokens float64
	last   time.Time
	refill time.Duration // one token per refill
}

const (
	hintBurst       = 2
	hintRefillPolls = 4
)

func newHintBudget(now time.Time, waiterPoll time.Duration) hintBudget {
	return hintBudget{tokens: hintBurst, last: now, refill: hintRefillPolls * waiterPoll}
}

// take spends a token if one is left at now.
func (b *hintBudget) take(now time.Time) bool {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(hintBurst, b.tokens+float64(d)/float64(b.refill))
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// refund gives back the token of a step that made progress.
func (b *hintBudget) refund() { b.tokens = min(hintBurst, b.tokens+1) }

// nextWaiter returns the first entry of another owner in queue: the head, for a waiter that leaves
// the queue from its head or releases the lock.
func nextWaiter(queue []QueueEntry, owner Owner) (QueueEntry, bool) {
	self := owner.String()
	for _, e := range queue {
		if e.Owner != self {
			return e, true
		}
	}
	return QueueEntry{}, false
}

// secondWaiter returns the entry of another owner after first in queue: the waiter next in line
// behind the head, which watches it (deadhead.go).
func secondWaiter(queue []QueueEntry, owner Owner, first QueueEntry) (QueueEntry, bool) {
	self := owner.String()
	for _, e := range queue {
		if e.Owner != self && !e.Same(first) && first.Less(e) {
			return e, true
		}
	}
	return QueueEntry{}, false
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
