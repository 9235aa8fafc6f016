package lock

import "time"

// The adaptive fallback (docs/design.md, "The poll schedule"): a Locker that listens for hints
// steps rarely, trusting them to wake it. When a step finds by a poll what a hint should have
// said (we moved up to the head, or the record we saw held is free), the hint was lost: hints may
// not be arriving at all (UDP blocked between pods). The acquisition then keeps to the schedule
// of a Locker without hints for the rest of its run, and so do this Locker's acquisitions of any
// lock until hintFallbackFor after its last missed hint, unless a hint arrives meanwhile (which
// also ends the fallback of a running acquisition). Its queue entry keeps its hint
// address, so others go on judging it by the hinted rules, which are the more lenient ones.
// A waiter behind the head does not wait for a missed hint to learn that hints do not reach it:
// its probes tell it sooner (hintprobe.go). An echo, like a hint, ends the fallback.

// hintFallbackFor is how long a Locker keeps to the unhinted schedule after a missed hint.
const hintFallbackFor = 2 * time.Minute

// missedHint records that a step found by a poll what a hint should have told it.
func (l *Locker) missedHint() {
	l.mu.Lock()
	l.hintMissedAt = l.opts.clock.Now()
	l.mu.Unlock()
}

// hintArrived records that a hint reached us: hints work again.
func (l *Locker) hintArrived() {
	l.mu.Lock()
	l.hintMissedAt = time.Time{}
	l.mu.Unlock()
}

// hintsMissed reports whether a hint went missing less than hintFallbackFor ago.
func (l *Locker) hintsMissed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.hintMissedAt.IsZero() && l.opts.clock.Since(l.hintMissedAt) < hintFallbackFor
}

// missed counts a missed hint for this acquisition: it falls back to the unhinted schedule. A miss
// found while falling back already (our fast polls found what no hint told us) extends the
// Locker's fallback: only a hint that arrives ends it early.
func (a *acquisition) missed(what string) {
	if !a.listening() {
		return
	}
	a.l.missedHint()
	if !a.fallback {
		a.fallback = true
		a.l.opts.log.V(1).Info("a hint did not arrive; polling as without hints for a while", "lock", a.lockID, "missed", what)
	}
}
