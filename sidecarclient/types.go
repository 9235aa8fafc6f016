package sidecarclient

import (
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
	LeaseRemainingMs int64  `json:"leaseRemainingMs,omitempty"` // while held: time left to the lease's self-fence deadline
	LeaseMs          int64  `json:"leaseMs,omitempty"`          // while held: the lease duration
	Reason           string `json:"reason,omitempty"`           // why lost / why waiting
	// HeldSince is when this pod was granted the lock (the time of its acquired event), while
	// held: a client that subscribes to the events after the grant still learns when it began.
	HeldSince time.Time `json:"heldSince,omitzero"`
}

// Granted reports whether the status hands its reader the lock: state held with a fencing token.
// Act as the holder only on an acquire (or Try-mode yield) answer for which it is true.
func (s LockStatus) Granted() bool { return s.State == StateHeld && s.Token > 0 }

// EventType names a push notice on the event stream; it is the SSE event name.
type EventType string

// The event types the sidecar publishes.
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
	// Time is when it happened on the sidecar's wall clock. For lost and released it is when the
	// lease stopped being valid: its deadline when the sidecar noticed only later (a paused
	// process), so that a hold reported from acquired to lost never outlasts its validity.
	Time time.Time `json:"time"`
}

// Sentinel errors of the API. The sidecar's lock holder returns them (wrapped or not) and its
// handler maps them to an HTTP status; a Client returns *Error, which matches them with errors.Is.
var (
	ErrUnknownLock = errors.New("baton: unknown lock")            // 404
	ErrNotTryMode  = errors.New("baton: lock is not in Try mode") // 409
	ErrNotHeld     = errors.New("baton: lock is not held")        // 409
	ErrLocked      = errors.New("baton: lock is held elsewhere")  // 409 (acquire gave up)
	// ErrAppNotReady: the sidecar gave the lock up because the pod's app containers were not
	// ready (spec.yieldWhenUnready), and takes it again only once they are.
	ErrAppNotReady = errors.New("baton: the app is not ready") // 409
	// ErrSuperseded: the operator marked this pod superseded by a pod of its workload's newest
	// revision (spec.handoff NewestRevision); the sidecar gave the lock up and takes it no more.
	ErrSuperseded = errors.New("baton: the pod is superseded by a newer revision") // 409
	// ErrShuttingDown: the sidecar got SIGTERM; it acquires nothing more and releases what it holds.
	ErrShuttingDown = errors.New("baton: sidecar is shutting down") // 503
	// ErrStarting: the sidecar is not serving its locks yet; the error's message says what it
	// waits for (Cassandra, the lock schema). Ask again later.
	ErrStarting = errors.New("baton: sidecar is starting") // 503
	// ErrAcquiring: another acquisition of the lock is in progress in this pod (another process
	// asked first and is still waiting, or the pod's previous grant is still being cleaned up).
	// Nothing was granted to this request; ask again later.
	ErrAcquiring = errors.New("baton: another acquisition of the lock is in progress in this pod") // 409
	// ErrHeldByPod: the pod already holds the lock for the process that acquired it. The sidecar
	// cannot tell processes apart, so it grants a held lock to nobody else: two processes never
	// both act as its holder. A process that knows the grant is its own dead predecessor's may
	// release it with the token (LockStatus.Token) and acquire again.
	ErrHeldByPod = errors.New("baton: the lock is already held by this pod") // 409
	// ErrTokenMismatch: a release or yield named a token that is not the pod's current grant of
	// the lock: the caller's grant ended, and the lock now belongs to another grant, which is
	// left alone.
	ErrTokenMismatch = errors.New("baton: the token is not this pod's current grant of the lock") // 409
)

// SocketPath is where the sidecar serves the API by default, in the volume it shares with the app;
// the app finds the path in the environment variable EnvSocket too.
const SocketPath = "/var/run/baton/baton.sock"

// EnvSocket is the environment variable that holds the socket's path in every app container.
const EnvSocket = "BATON_SOCKET"

// Protocol details shared by the sidecar's handler and the Client.
const (
	// LocksPath prefixes the routes of one lock: LocksPath + lockID, + "/acquire", + "/release",
	// + "/yield".
	LocksPath = "/v1/locks/"
	// MaxBodyBytes bounds request and error bodies; larger requests get 413.
	MaxBodyBytes = 1 << 20
)

// AcquireRequest is the optional body of POST /v1/locks/{lockID}/acquire.
type AcquireRequest struct {
	// Wait is a Go duration string such as "5s"; absent or "0s" means try once.
	Wait *string `json:"wait"`
}

// ReleaseRequest is the optional body of POST /v1/locks/{lockID}/release.
type ReleaseRequest struct {
	// Token is the fencing token of the grant to release (LockStatus.Token of the acquire
	// answer). With it the sidecar releases only that grant and answers 409 token_mismatch when
	// the pod holds another one; without it, whatever grant the pod holds.
	Token *int64 `json:"token,omitempty"`
}

// YieldRequest is the optional body of POST /v1/locks/{lockID}/yield.
type YieldRequest struct {
	// Wait is as in AcquireRequest (Try mode: how long to wait to be granted the lock again).
	Wait *string `json:"wait,omitempty"`
	// Token is as in ReleaseRequest: yield only that grant.
	Token *int64 `json:"token,omitempty"`
}
