package lock

import "sync"

// Waker carries hints that a lock was released or its queue changed, so that waiters re-read the
// store at once instead of at their next poll. A hint only triggers a re-read: it is harmless when
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

// LocalWaker is a Waker for Lockers in one process, for example many contenders in a test or a
// benchmark. It is safe for concurrent use.
type LocalWaker struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// NewLocalWaker returns an in-process Waker.
func NewLocalWaker() *LocalWaker {
	return &LocalWaker{subs: make(map[string]map[chan struct{}]struct{})}
}

// Notify wakes every subscriber of lockID without blocking.
func (w *LocalWaker) Notify(lockID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs[lockID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Subscribe registers a subscriber of lockID.
func (w *LocalWaker) Subscribe(lockID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs[lockID] == nil {
		w.subs[lockID] = make(map[chan struct{}]struct{})
	}
	w.subs[lockID][ch] = struct{}{}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.subs[lockID], ch)
		if len(w.subs[lockID]) == 0 {
			delete(w.subs, lockID)
		}
	}
}
