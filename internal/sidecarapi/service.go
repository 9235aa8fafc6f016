package sidecarapi

import (
	"context"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// Service is what the handler serves: the sidecar's lock holder implements it. Methods without a
// ctx must not block; the handler calls them on every request.
type Service interface {
	// Locks returns every declared lock, in declaration order.
	Locks() []sidecarclient.LockStatus
	// Lock returns one declared lock; false means lockID is not a declared lock.
	Lock(lockID string) (sidecarclient.LockStatus, bool)
	// Acquire (Try mode only) tries to acquire lockID, waiting up to wait (0 = one try) and no
	// longer than ctx allows. It returns without error only with a grant: state held and the
	// grant's fencing token. It returns sidecarclient.ErrUnknownLock, ErrNotTryMode, ErrLocked
	// (with the lock's current status) when it gave up, ErrAcquiring while another acquisition of
	// lockID is in progress in the pod and ErrHeldByPod while the pod holds it (a grant belongs to
	// the one request that got it); other errors are reported as internal errors.
	Acquire(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error)
	// Release (Try mode only) releases lockID: only the grant with token when token is not 0, any
	// grant the pod holds when it is. It returns sidecarclient.ErrUnknownLock, ErrNotTryMode,
	// ErrNotHeld, or ErrTokenMismatch (with the lock's status, its grant left alone).
	Release(ctx context.Context, lockID string, token int64) (sidecarclient.LockStatus, error)
	// Yield releases lockID (only the grant with token when token is not 0) and queues again
	// behind the waiters, so that the next one is granted now: in Blocking mode the sidecar takes
	// its turn again by itself; in Try mode Yield then acquires again, waiting up to wait as
	// Acquire does. It returns sidecarclient.ErrUnknownLock, ErrNotHeld, ErrTokenMismatch,
	// ErrShuttingDown, or (Try mode) ErrLocked when not granted again within wait.
	Yield(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error)
	// Subscribe registers for push notices. The channel closes on cancel or when the sidecar shuts
	// down; cancel must be safe to call more than once and after shutdown. A subscriber that reads
	// too slowly may miss events; how many are buffered is up to the implementation.
	Subscribe() (events <-chan sidecarclient.Event, cancel func())
	// Healthy returns nil when the sidecar is alive and the lock store is reachable.
	Healthy(ctx context.Context) error
	// Ready reports whether this pod holds every required lock.
	Ready() bool
	// Started reports whether the first acquisition is done (Blocking mode); always true in Try
	// mode.
	Started() bool
}

// Starter is implemented by a Service that starts before it can serve its locks (the sidecar
// connecting to Cassandra). While Starting returns an error, the handler answers every route,
// the probes included, with 503 and code starting, the error's message saying what the Service
// waits for, and calls no other method of the Service. Starting must not block.
//
// It does not order requests against the end of the start: a request that saw Starting return nil
// is served by the started Service, one that arrived a moment earlier may still be answered 503.
type Starter interface {
	Starting() error
}
