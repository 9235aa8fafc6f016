package hintudp

import "time"

// SetClock makes h's echo budgets run on now, for tests.
func SetClock(h *Hinter, now func() time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = now
}
