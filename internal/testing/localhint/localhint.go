// Package localhint is a lock.Hinter for Lockers in one process: many contenders in a test or a
// benchmark. Between processes hints travel over UDP (package hintudp); the lock never depends on
// hints.
package localhint

import (
	"fmt"
	"sync"

	"github.com/baton-dev/baton/lock"
)

// Hinter delivers hints to the waiters of this process. It is safe for concurrent use.
type Hinter struct {
	addr string

	mu        sync.Mutex
	waiters   map[waiter]*listener
	listening map[string]int // lock ID: how many waiters listen for it here
	sent      int
}

var _ lock.Hinter = (*Hinter)(nil)

type waiter struct{ lockID, owner string }

type listener struct{ hints chan lock.Hint }

// New returns an in-process Hinter. Its address is unique to it, so that hints between separate
// Hinters (separate "processes") are lost, as they would be between processes without a network.
func New() *Hinter {
	h := &Hinter{waiters: make(map[waiter]*listener), listening: make(map[string]int)}
	h.addr = fmt.Sprintf("local:%p", h)
	return h
}

// Listen implements lock.Hinter. A second listener for the same waiter replaces the first. Two
// hints may be pending for it, as with hintudp, so that an echo never crowds out a hint.
func (h *Hinter) Listen(lockID, owner string) (string, <-chan lock.Hint, func()) {
	w, l := waiter{lockID, owner}, &listener{hints: make(chan lock.Hint, 2)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.waiters[w]; !ok {
		h.listening[lockID]++
	}
	h.waiters[w] = l
	return h.addr, l.hints, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.waiters[w] == l {
			delete(h.waiters, w)
			if h.listening[lockID]--; h.listening[lockID] <= 0 {
				delete(h.listening, lockID)
			}
		}
	}
}

// Send implements lock.Hinter: it delivers h without blocking when addr is this Hinter's and the
// waiter listens; a hint that finds the waiter's buffer full is dropped (pending hints are enough
// to make it look). A probe to this Hinter's address comes back at once as an echo to the waiter
// that sent it (its lock and owner) while another waiter of that lock listens here, as hintudp
// answers probes: a prober whose waiter ahead has left hears nothing.
func (h *Hinter) Send(addr string, hint lock.Hint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent++
	if addr != h.addr {
		return
	}
	if hint.Kind == lock.HintProbe {
		others := h.listening[hint.LockID]
		if _, self := h.waiters[waiter{hint.LockID, hint.Owner}]; self {
			others--
		}
		if others <= 0 {
			return
		}
		hint.Kind = lock.HintEcho
	}
	if l, ok := h.waiters[waiter{hint.LockID, hint.Owner}]; ok {
		select {
		case l.hints <- hint:
		default:
		}
	}
}

// Sent returns how many hints were sent through h.
func (h *Hinter) Sent() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent
}
