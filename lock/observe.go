package lock

import "time"

// Acquire, step 3 (docs/design.md; rule 3): expiry by observation. A held record blocks a grant
// until this Locker has seen the very same write for a full lease on its own clock.

// observation is what a Locker knows of a lock's owner record: the record and when it was first
// and last read in that state (Locker clock).
type observation struct {
	rec    Record
	seenAt time.Time
	lastAt time.Time
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
// the very write a Locker saw before: the restore procedure (docs/concepts-and-safety.md) restarts every process.
func (l *Locker) observe(lockID string, rec Record, receivedAt time.Time) (seenAt time.Time, current bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.opts.mutations.has(mutStaleObservation) {
		return l.observeStaleLocked(lockID, rec, receivedAt)
	}
	o, ok := l.observed[lockID]
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
// Acquire, step 3).
func (o options) observationLife(rec Record) time.Duration {
	return max(o.lease, rec.Lease) + o.requestTimeout
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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
