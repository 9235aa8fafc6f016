package lock

import "time"

// The hint path watch (docs/design.md, "When hints do not arrive"). A waiter behind the head that
// listens for hints steps only every rest poll (10 s by default), trusting the waiter ahead of it
// to tell it when it has become the head. Whether that waiter's hints can reach it at all (UDP may
// be blocked between pods from the start, or the Hinter ahead may be an older release's) it learns
// by probing, at no store request: every probeEvery it sends a HintProbe to the hint address of
// the entry right ahead of its own, and the Hinter there echoes it (Hinter). An echo, or any hint
// for our entry, counts as heard. A probe left unanswered for probeGrace, or an entry ahead without
// a hint address (its Locker has no Hinter and sends no hints), makes the waiter deaf: it steps as
// a waiter without hints (every waiter poll, next in line every two thirds of one), at once and
// until it hears something again.
//
// Deafness changes the rest poll only. The head needs no probe: it reads the owner record every
// head poll (1 s) in any case, which bounds a lost release hint, and a head that finds by a poll
// what a hint should have said falls back to the schedule without hints (hintfallback.go).
//
// A Hinter echoes a probe only while another waiter of the lock listens there (Hinter): once the
// waiter ahead has been granted or has gone, its Hinter falls silent, and a waiter that moved up to
// the head without being told goes deaf within probeGrace and steps as without hints, instead of
// resting on its rest poll behind a waiter that is not there (the grant's queue read normally tells
// it first: dequeueTellHead).
//
// Not guaranteed: an echo checks the return path to the probe's source address (our socket), not
// the hint address advertised in our queue entry, to which hints are sent; the two are the same
// for the sidecar, not necessarily for a process that advertises another address. It shows that
// datagrams from the Hinter ahead reach us, not that its next hint will; a single hint lost on a
// path that echoes may still cost a rest poll. An echo says that some other waiter of the lock
// listens at the Hinter probed, not that it is still the one ahead of us. Hints stopping while a
// waiter waits are noticed within probeEvery + probeGrace, not at once. Anyone who can send
// datagrams to our hint port can keep us hinted (their datagrams count as heard): that costs
// latency only, bounded by the rest poll, as without this watch.

const (
	// probeEvery is how often a waiter behind the head probes the entry ahead of it.
	probeEvery = 2 * time.Second
	// probeGrace is how long a probe may go unanswered before the waiter counts itself deaf.
	probeGrace = 500 * time.Millisecond
)

// probing reports whether we watch the hint path: we listen for hints and wait behind the head.
func (a *acquisition) probing() bool {
	return a.listening() && a.block && a.queued && a.ahead > 0
}

// probeAfterStep does, after a step, what its queue read asks of the watch: probe a new entry
// ahead of us at once, the same one again when a probe is due, and count ourselves deaf behind an
// entry that has no hint address.
func (a *acquisition) probeAfterStep() {
	if !a.probing() {
		a.probeAddr, a.probeOut = "", false
		return
	}
	to := a.before.Hint
	if to == "" {
		a.probeAddr, a.probeOut = "", false
		a.setDeaf("the waiter ahead sends no hints")
		return
	}
	now := a.l.opts.clock.Now()
	if to != a.probeAddr || !a.probeOut && now.Sub(a.probeSent) >= probeEvery {
		a.sendProbe(to, now)
	}
}

// sendProbe sends a probe for our entry to the Hinter at to.
func (a *acquisition) sendProbe(to string, now time.Time) {
	a.probeAddr, a.probeSent, a.probeOut = to, now, true
	a.l.opts.hinter.Send(to, Hint{LockID: a.lockID, Owner: a.entry.Owner, Enqueued: a.entry.Enqueued, Kind: HintProbe})
}

// nextProbeEvent returns when the watch has something to do: the end of an outstanding probe's
// grace, or the next probe. ok is false when we are not probing.
func (a *acquisition) nextProbeEvent() (at time.Time, ok bool) {
	if !a.probing() || a.probeAddr == "" {
		return time.Time{}, false
	}
	if a.probeOut {
		return a.probeSent.Add(probeGrace), true
	}
	return a.probeSent.Add(probeEvery), true
}

// probeEventDue reports whether nextProbeEvent has come at now.
func (a *acquisition) probeEventDue(now time.Time) bool {
	at, ok := a.nextProbeEvent()
	return ok && !now.Before(at)
}

// probeTimer returns a channel that fires at nextProbeEvent, and a function that stops its timer;
// a nil channel when there is nothing to do.
func (a *acquisition) probeTimer() (<-chan time.Time, func()) {
	at, ok := a.nextProbeEvent()
	if !ok {
		return nil, func() {}
	}
	t := a.l.opts.clock.NewTimer(max(0, at.Sub(a.l.opts.clock.Now())))
	return t.C(), func() { t.Stop() }
}

// probeDue acts on the watch's timer at now: an outstanding probe that went unanswered for
// probeGrace makes us deaf; otherwise the next probe goes out when due. It reports whether we
// just turned deaf while waiting a rest poll of the hinted schedule: the step is due now.
func (a *acquisition) probeDue(now time.Time) (stepNow bool) {
	if a.probeOut {
		if now.Sub(a.probeSent) < probeGrace {
			return false
		}
		a.probeOut = false
		wasHinted := a.hinted() && !a.deaf
		a.setDeaf("no echo from the waiter ahead")
		return wasHinted
	}
	if now.Sub(a.probeSent) >= probeEvery {
		a.sendProbe(a.probeAddr, now)
	}
	return false
}

// heard records that something for our entry arrived (an echo or a hint): hints can reach us.
func (a *acquisition) heard() { a.probeOut, a.deaf = false, false }

// setDeaf records that hints from the waiter ahead may not reach us.
func (a *acquisition) setDeaf(why string) {
	if !a.deaf {
		a.deaf = true
		a.l.opts.log.V(1).Info("hints may not reach us; polling as without hints until something arrives", "lock", a.lockID, "why", why)
	}
}
