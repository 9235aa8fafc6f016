package lock

// Waker carries hints that a lock was released or its queue changed, so that waiters re-read the
// store at once instead of at their next poll. Tests and benchmarks use an in-process one
// (internal/localwaker). A hint only triggers a re-read: it is harmless when
// forged, duplicated or lost, and safety never depends on it.
type Waker interface {
	// Notify tells the waiters of lockID that its state changed.
	Notify(lockID string)
	// Subscribe returns a channel that receives after Notify(lockID), and a function that
	// unsubscribes.
	Subscribe(lockID string) (hints <-chan struct{}, cancel func())
}

type noWaker struct{}

func (noWaker) Notify(string)                              {}
func (noWaker) Subscribe(string) (<-chan struct{}, func()) { return nil, func() {} }
