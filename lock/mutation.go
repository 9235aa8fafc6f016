package lock

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"
)

// The mutation seams: every deliberately unsafe (or unfair) variant of the lock is defined in this
// file. They exist only so that the tests can prove that their checks catch each kind of fault (a
// checker that cannot fail is not a check): the simulation's mutation test
// (TestSimulationCatchesMutants, run by make test and make soak) runs each variant in the fault
// class that should expose it, and a few tests of fairness show what they would see without one
// rule.
//
// Nothing outside this package's tests can turn a variant on: the options below are unexported,
// and export_test.go exports them to the tests only (WithMutation, Mutations,
// WithoutFairnessGuard, WithoutWholeQueueReads, WithoutDeadWaiterSkip). In every other build
// options.mutations is zero and each seam is one branch not taken.
//
// Each seam is a check "mutations.has(mutX)" (grep for it) in the function named below; where the
// unsafe variant is more than a line or two, its code is here too. The rules are docs/design.md's;
// "fairness" and "load" variants break what the queue and the hint budget promise, not safety.
//
//	name (WithMutation)      breaks    seam
//	no-safety-margin         rule 4    Lease.extendLocked (renew.go)
//	fence-from-receive       rule 4    writeGrant (grant.go), Lease.renewOnce (renew.go)
//	observe-from-send        rule 3    acquisition.contend (acquire.go)
//	unknown-renewal-applied  rule 5    Lease.renewOnce (renew.go)
//	zero-wait-any-identity   rule 7    Locker.predecessor (owner.go)
//	revoked-is-free          rule 8    acquisition.mustWait (observe.go)
//	own-lease-only           rule 3    acquisition.mustWait (observe.go)
//	peer-timestamp-expiry    rule 3    acquisition.mustWait (observe.go)
//	token-not-bumped         rule 2    writeGrant (grant.go)
//	stale-observation        rule 3    Locker.observe (observe.go)
//	remove-at-own-clock      fairness  Locker.removeOther (deadwaiters.go)
//	dequeue-before-grant     fairness  acquisition.grant (grant.go)
//	cas-on-hint              load      acquisition.step (acquire.go)
//	zero-wait-without-proof  rule 7    Locker.predecessor (owner.go)
//
// Three more variants, unfair but not unsafe, are outside the simulation's mutation test; each has
// an option of its own for the one test that shows its rule matters:
//
//	option                   breaks    seam
//	WithoutFairnessGuard     fairness  acquisition.casFirst (casfirst.go)
//	WithoutWholeQueueReads   fairness  Locker.readQueue, pruneQueueBoundsLocked (queueread.go)
//	WithoutDeadWaiterSkip    fairness  acquisition.dropDead (deadwaiters.go)
//
// The sidecar's Holder has seams of its own (sidecar/holder.go, holderMutations).

// mutations selects deliberately unsafe variants of the lock (see above).
type mutations uint32

const (
	// mutNoSafetyMargin: the holder counts its lease valid until send + lease, ignoring the margin
	// that absorbs clock-rate differences.
	mutNoSafetyMargin mutations = 1 << iota
	// mutFenceFromReceive: the holder counts its lease from when a grant or renewal came back
	// instead of from when it was sent.
	mutFenceFromReceive
	// mutObserveFromSend: a contender counts its observation of a record from when its read was
	// sent instead of from when it was received.
	mutObserveFromSend
	// mutUnknownRenewalApplied: a renewal whose outcome is unknown counts as applied, unsettled.
	mutUnknownRenewalApplied
	// mutZeroWaitAnyIdentity: zero-wait restart is used without WithZeroWaitRestart, so a second
	// live process with the same identity takes the lock at once.
	mutZeroWaitAnyIdentity
	// mutRevokedIsFree: a revoked grant counts as free at once, before its holder can know.
	mutRevokedIsFree
	// mutOwnLeaseOnly: a contender waits out its own lease, not the longer one the holder promised.
	mutOwnLeaseOnly
	// mutPeerTimestampExpiry: expiry is judged from the holder's wall-clock timestamp in the
	// record instead of by observation on the contender's own clock.
	mutPeerTimestampExpiry
	// mutTokenNotBumped: a grant keeps the previous grant's token.
	mutTokenNotBumped
	// mutBargeAhead: a CAS-first grant is kept although others are queued (no fairness guard).
	// Unfair, not unsafe: the fairness test uses it (WithoutFairnessGuard), the simulation's
	// mutation test does not.
	mutBargeAhead
	// mutNoWholeQueueReads: queue reads stay bounded after the first (no whole-queue read every
	// fullQueueReadEvery). Unfair, not unsafe: the skewed-waiter test uses it (WithoutWholeQueueReads).
	mutNoWholeQueueReads
	// mutNoDeadWaiters: waiters count every entry ahead of them until it ages out, refreshed or
	// not (no dropDead). Unfair, not unsafe: the dead-waiter test uses it (WithoutDeadWaiterSkip).
	mutNoDeadWaiters
	// mutStaleObservation: an observation is never void and licenses a grant on whatever record a
	// read returns, also an older-looking one (a record deleted and created again, or restored).
	mutStaleObservation
	// mutRemoveAtOwnClock: another owner's queue entry is removed at the remover's clock, not as
	// the write it was seen with. Unfair, not unsafe: a live waiter judged dead by a remover whose
	// clock runs ahead cannot re-enter the queue until its own clock passes the remover's.
	mutRemoveAtOwnClock
	// mutDequeueBeforeGrant: the head removes its queue entry before its grant lands, and writes
	// it again when the grant does not apply. Unfair, not unsafe: a newcomer arriving meanwhile
	// finds the queue empty and the lock free and is granted ahead of the head.
	mutDequeueBeforeGrant
	// mutCASOnHint: a release hint's free record is taken as read, and the head sends its grant
	// conditioned on it without reading the record. Not unsafe (the condition decides), but a
	// forged hint costs a lightweight transaction on the lock's partition instead of a read.
	mutCASOnHint
	// mutZeroWaitWithoutProof: with WithZeroWaitRestart, any incarnation of our identity counts as
	// our dead predecessor, whatever restart secret it proved: a process that copied a live
	// holder's identity takes its grant at once.
	mutZeroWaitWithoutProof
)

func (m mutations) has(x mutations) bool { return m&x != 0 }

// mutationNames names the variants of the simulation's mutation test, as WithMutation takes them.
var mutationNames = map[string]mutations{
	"no-safety-margin":        mutNoSafetyMargin,
	"fence-from-receive":      mutFenceFromReceive,
	"observe-from-send":       mutObserveFromSend,
	"unknown-renewal-applied": mutUnknownRenewalApplied,
	"zero-wait-any-identity":  mutZeroWaitAnyIdentity,
	"revoked-is-free":         mutRevokedIsFree,
	"own-lease-only":          mutOwnLeaseOnly,
	"peer-timestamp-expiry":   mutPeerTimestampExpiry,
	"token-not-bumped":        mutTokenNotBumped,
	"stale-observation":       mutStaleObservation,
	"remove-at-own-clock":     mutRemoveAtOwnClock,
	"dequeue-before-grant":    mutDequeueBeforeGrant,
	"cas-on-hint":             mutCASOnHint,
	"zero-wait-without-proof": mutZeroWaitWithoutProof,
}

// mutationList lists the variants of the simulation's mutation test by name, sorted.
func mutationList() []string {
	names := make([]string, 0, len(mutationNames))
	for n := range mutationNames {
		names = append(names, n)
	}
	sort.Strings(names)
	return slices.Clip(names)
}

// withMutation makes the Locker the unsafe variant called name (mutationNames).
func withMutation(name string) Option {
	return func(o *options) {
		m, ok := mutationNames[name]
		if !ok {
			o.errs = append(o.errs, fmt.Errorf("%w: unknown mutation %q", ErrInvalidOption, name))
		}
		o.mutations |= m
	}
}

// withoutFairnessGuard keeps a CAS-first grant even when others are queued, so that the fairness
// test can show it would fail without the guard.
func withoutFairnessGuard() Option {
	return func(o *options) { o.mutations |= mutBargeAhead }
}

// withoutWholeQueueReads keeps every queue read after the first bounded, so that the skewed-waiter
// test can show it would fail without the whole-queue reads.
func withoutWholeQueueReads() Option {
	return func(o *options) { o.mutations |= mutNoWholeQueueReads }
}

// withoutDeadWaiterSkip makes waiters count every entry ahead of them until it ages out, so that
// the dead-waiter test can show it would fail without dropDead.
func withoutDeadWaiterSkip() Option {
	return func(o *options) { o.mutations |= mutNoDeadWaiters }
}

// observeStaleLocked is observe under mutStaleObservation: observations never void, and an
// older-looking read is granted on. The caller holds l.mu.
func (l *Locker) observeStaleLocked(lockID string, rec Record, receivedAt time.Time) (seenAt time.Time, current bool) {
	o, ok := l.observed[lockID]
	if !ok || !o.rec.sameState(rec) && !rec.olderThan(o.rec) {
		o = observation{rec: rec, seenAt: receivedAt}
		l.observed[lockID] = o
	}
	return o.seenAt, true
}

// grantDequeuedFirst is grant under mutDequeueBeforeGrant: the head removes its queue entry before
// its grant lands, and writes it again under its old name when the grant does not apply.
func (a *acquisition) grantDequeuedFirst(ctx context.Context, prev Record, exists bool) (*Lease, error) {
	if a.queued {
		<-a.leaveQueueInBackground(ctx, false, nil)
	}
	next, sent, applied, _, _, err := a.writeGrant(ctx, prev, exists)
	if !a.queued && a.entry.Enqueued != 0 && (err != nil || !applied) {
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
