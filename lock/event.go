package lock

import "time"

// EventKind says what an Event reports.
type EventKind int

const (
	// EventQueued reports where a waiting Acquire stands: Ahead, and Holder and Token once the
	// head of the queue has read the owner record.
	EventQueued EventKind = iota + 1
	// EventRenewed reports one renewal attempt of a held lease: Took and Err.
	EventRenewed
)

// Event is what a Locker reports to the function set with WithObserver. Kind says which fields
// are set.
type Event struct {
	Kind   EventKind
	LockID string

	// Ahead is how many waiters are ahead in the queue; 0 means this one is the head (EventQueued).
	Ahead int
	// Holder and Token name the current owner record when the head has read it; Holder is "" when
	// the lock is free or the record was not read (EventQueued).
	Holder string
	Token  int64

	// Took is how long the renewal attempt took, and Err its error: nil when the lease was
	// extended (EventRenewed).
	Took time.Duration
	Err  error
}
