package lock

// mutations selects deliberately unsafe variants of the lock. They exist only so that the
// simulation can prove that its checks catch each kind of unsafety (a checker that cannot fail is
// not a check); nothing outside this package's tests can set them (see export_test.go).
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
