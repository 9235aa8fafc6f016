package api

import (
	"context"
	"errors"
	"time"
)

// State of one lock as the app sees it.
type State string

// The states a lock can be in.
const (
	// StateHeld: this pod holds the lock; LockStatus.Token is its fencing token.
	StateHeld State = "held"
	// StateWaiting: this pod is queued for the lock; LockStatus.QueuePosition says where.
	StateWaiting State = "waiting"
	// StateIdle: this pod neither holds nor waits for the lock (Try mode, before acquire or after
	// release).
	StateIdle State = "idle"
	// StateLost: this pod held the lock and lost it (lease ran out, store unreachable, revoked);
	// LockStatus.Reason says why and Token is the last token it held.
	StateLost State = "lost"
)

// LockStatus describes one declared lock from this pod's point of view.
type LockStatus struct {
	LockID           string `json:"lockId"`
	State            State  `json:"state"`
	Token            int64  `json:"token,omitempty"`            // fencing token while held (or last held when lost)
	Holder           string `json:"holder,omitempty"`           // pod currently holding it (namespace/name), if known
	QueuePosition    int    `json:"queuePosition,omitempty"`    // 1 = next in line, while waiting
	LeaseRemainingMs int64  `json:"leaseRemainingMs,omitempty"` // while held
	Reason           string `json:"reason,omitempty"`           // why lost / why waiting
}

// EventType names a push notice on the event stream; it is the SSE event name.
type EventType string

// The event types a Service publishes.
const (
	EventAcquired EventType = "acquired" // this pod was granted the lock; Event.Token is the new token
	EventLost     EventType = "lost"     // this pod stopped holding the lock without releasing it
	EventReleased EventType = "released" // this pod released the lock
)

// Event is one push notice about a lock.
type Event struct {
	Type   EventType `json:"type"`
	LockID string    `json:"lockId"`
	Token  int64     `json:"token"`
	Reason string    `json:"reason,omitempty"`
	Time   time.Time `json:"time"`
}

// Service is what the handler serves: the sidecar's lock holder implements it. Methods without a
// ctx must not block; the handler calls them on every request.
type Service interface {
	// Locks returns every declared lock, in declaration order.
	Locks() []LockStatus
	// Lock returns one declared lock; false means lockID is not a declared lock.
	Lock(lockID string) (LockStatus, bool)
	// Acquire (Try mode only) tries to acquire lockID, waiting up to wait (0 = one try) and no
	// longer than ctx allows. It returns ErrUnknownLock, ErrNotTryMode, or ErrLocked (with the
	// lock's current status) when it gave up; other errors are reported as internal errors.
	Acquire(ctx context.Context, lockID string, wait time.Duration) (LockStatus, error)
	// Release (Try mode only) releases lockID. It returns ErrUnknownLock, ErrNotTryMode or
	// ErrNotHeld.
	Release(ctx context.Context, lockID string) (LockStatus, error)
	// Subscribe registers for push notices. The channel closes on cancel or when the sidecar shuts
	// down; cancel must be safe to call more than once and after shutdown. A subscriber that reads
	// too slowly may miss events; how many are buffered is up to the implementation.
	Subscribe() (events <-chan Event, cancel func())
	// Healthy returns nil when the sidecar is alive and the lock store is reachable.
	Healthy(ctx context.Context) error
	// Ready reports whether this pod holds every required lock.
	Ready() bool
	// Started reports whether the first acquisition is done (Blocking mode); always true in Try
	// mode.
	Started() bool
}

// Sentinel errors a Service returns (wrapped or not), mapped to HTTP status by the handler. A
// Client returns *Error, which matches these with errors.Is too.
var (
	ErrUnknownLock = errors.New("api: unknown lock")            // 404
	ErrNotTryMode  = errors.New("api: lock is not in Try mode") // 409
	ErrNotHeld     = errors.New("api: lock is not held")        // 409
	ErrLocked      = errors.New("api: lock is held elsewhere")  // 409 (acquire gave up)
)
