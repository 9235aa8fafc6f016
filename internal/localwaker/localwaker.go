// Package localwaker is a lock.Waker for Lockers in one process: many contenders in a test or a
// benchmark. Between processes a hint must travel another way; the lock never depends on hints.
package localwaker

import (
	"sync"

	"github.com/baton-dev/baton/lock"
)

// Waker wakes the subscribers of a lock in this process. It is safe for concurrent use.
type Waker struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

var _ lock.Waker = (*Waker)(nil)

// New returns an in-process Waker.
func New() *Waker {
	return &Waker{subs: make(map[string]map[chan struct{}]struct{})}
}

// Notify wakes every subscriber of lockID without blocking.
func (w *Waker) Notify(lockID string) {
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
func (w *Waker) Subscribe(lockID string) (<-chan struct{}, func()) {
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
