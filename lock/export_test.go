package lock

import (
	"fmt"
	"slices"
	"sort"
)

// mutationNames names the unsafe variants for tests (see mutation.go).
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

// Mutations lists the unsafe variants by name.
func Mutations() []string {
	names := make([]string, 0, len(mutationNames))
	for n := range mutationNames {
		names = append(names, n)
	}
	sort.Strings(names)
	return slices.Clip(names)
}

// WithMutation makes the Locker one of the deliberately unsafe variants, for the simulation's
// mutation test only. It is defined in a _test.go file, so no build outside this package's tests
// can use it.
func WithMutation(name string) Option {
	return func(o *options) {
		m, ok := mutationNames[name]
		if !ok {
			o.errs = append(o.errs, fmt.Errorf("%w: unknown mutation %q", ErrInvalidOption, name))
		}
		o.mutations |= m
	}
}

// WithoutFairnessGuard keeps a CAS-first grant even when others are queued, so that the fairness
// test can show it would fail without the guard.
func WithoutFairnessGuard() Option {
	return func(o *options) { o.mutations |= mutBargeAhead }
}

// WithoutWholeQueueReads keeps every queue read after the first bounded, so that the skewed-waiter
// test can show it would fail without the whole-queue reads.
func WithoutWholeQueueReads() Option {
	return func(o *options) { o.mutations |= mutNoWholeQueueReads }
}

// WithoutDeadWaiterSkip makes waiters count every entry ahead of them until it ages out, so that
// the dead-waiter test can show it would fail without dropDead.
func WithoutDeadWaiterSkip() Option {
	return func(o *options) { o.mutations |= mutNoDeadWaiters }
}
