package sidecar

import (
	"context"
	"fmt"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/sidecarclient"
)

// appHealth binds the locks to the readiness of the pod's app containers (spec.yieldWhenUnready):
// the holder gives up what it holds once they have not all been ready for Options.YieldWhenUnready,
// and takes nothing again until they are. The Holder's mutex guards it.
//
// Only observations count. An AppWatch reports each reading of the pod's status through
// AppReadiness; while none arrives (the API server is unreachable) nothing changes, so a control
// plane outage never makes every holder of a cluster give up its locks at once.
type appHealth struct {
	// notReadySince is when a reading first showed the app not ready after the last reading that
	// showed it ready (zero while ready, or before any reading).
	notReadySince time.Time
	// detail says which containers were not ready at the last reading.
	detail string
	// heldBack is closed when the app is ready again after a yield for its health; nil while
	// the holder may acquire.
	heldBack chan struct{}
	// yieldedAfter is how long the app had not been ready when the holder yielded.
	yieldedAfter time.Duration
}

// heldBackReason is the status of a lock while the holder waits for the app to be ready.
func (a *appHealth) heldBackReason() string {
	return fmt.Sprintf("not queueing: the app was not ready for %v (%s); queueing again once it is ready",
		a.yieldedAfter.Round(time.Millisecond), a.detail)
}

// appHeldBack returns a channel that is closed once the app is ready again, or nil when the
// holder may acquire.
func (h *Holder) appHeldBack() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.app.heldBack == nil {
		return nil
	}
	return h.app.heldBack
}

// errAppNotReady returns ErrAppNotReady with the reason for a Try-mode request while held back,
// or nil when the holder may acquire.
func (h *Holder) errAppNotReady() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.app.heldBack == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", sidecarclient.ErrAppNotReady, h.app.heldBackReason())
}

// AppReadiness records one reading of the app containers' readiness taken at now; detail names
// the containers that are not ready. Once the app has not been ready for Options.YieldWhenUnready,
// counted from the later of that reading's start and each grant, the holder releases what it
// holds (the released event and the status give the reason) and acquires nothing until a reading
// shows the app ready. Without YieldWhenUnready it does nothing.
func (h *Holder) AppReadiness(ready bool, detail string, now time.Time) {
	after := h.opts.YieldWhenUnready
	if after <= 0 {
		return
	}
	h.mu.Lock()
	a := &h.app
	if ready {
		a.notReadySince, a.detail = time.Time{}, ""
		if a.heldBack != nil {
			close(a.heldBack)
			a.heldBack = nil
			h.mu.Unlock()
			h.log.Info("the app is ready again: taking the locks again")
			return
		}
		h.mu.Unlock()
		return
	}
	if a.notReadySince.IsZero() {
		a.notReadySince = now
	}
	a.detail = detail
	var (
		due         []string
		notReadyFor time.Duration
	)
	for _, id := range h.opts.LockIDs {
		s := h.locks[id]
		if s.lease == nil || s.lease == s.healthYield {
			continue
		}
		since := a.notReadySince
		if s.status.HeldSince.After(since) {
			since = s.status.HeldSince
		}
		if now.Sub(since) >= after {
			s.healthYield = s.lease
			due = append(due, id)
			notReadyFor = max(notReadyFor, now.Sub(since))
		}
	}
	if len(due) == 0 || h.stopping {
		h.mu.Unlock()
		return
	}
	if a.heldBack == nil {
		a.heldBack = make(chan struct{})
	}
	a.yieldedAfter = notReadyFor
	reason := fmt.Sprintf("the app was not ready for %v (%s)", notReadyFor.Round(time.Millisecond), detail)
	h.wg.Add(len(due)) // before Shutdown can wait (it sets stopping under mu)
	h.mu.Unlock()
	h.log.Info("giving up the locks: the app is not ready", "locks", due, "notReadyFor", notReadyFor.String(),
		"yieldWhenUnready", after.String(), "detail", detail)
	for _, id := range due {
		go func() {
			defer h.wg.Done()
			ctx, cancel := context.WithTimeout(h.stopAcquiring, h.opts.ShutdownTimeout)
			defer cancel()
			// Release (and in Blocking mode queue again, which waits for the app: appHeldBack).
			var err error
			if h.opts.Mode == batonv1.ModeTry {
				h.mu.Lock()
				lease := h.locks[id].healthYield
				h.mu.Unlock()
				err = h.release(ctx, id, lease, reason)
			} else {
				_, err = h.yield(ctx, id, 0, reason)
			}
			if err != nil && ctx.Err() == nil {
				h.log.Info("giving up a lock for the app's health failed", "lock", id, "err", err.Error())
			}
		}()
	}
}
