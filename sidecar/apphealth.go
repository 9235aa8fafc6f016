package sidecar

import (
	"context"
	"fmt"
	"strings"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/sidecarclient"
)

// holdBack keeps the holder away from its locks while its pod should not hold them, for two
// reasons, each read from the pod (PodWatch, Holder.PodReading):
//
//   - the app is not ready (spec.yieldWhenUnready): once the app containers have not all been
//     ready for Options.YieldWhenUnready the holder gives up what it holds, and takes nothing
//     again until a reading shows them ready;
//   - the pod is superseded (spec.handoff NewestRevision): while the operator's annotation
//     baton.dev/superseded is on the pod, the holder gives up what it holds at once, leaves the
//     queue, and takes nothing.
//
// Only readings count. While none arrives (the API server is unreachable) nothing changes, so a
// control-plane outage never makes every holder of a cluster give up its locks at once. The
// Holder's mutex guards it.
type holdBack struct {
	// notReadySince is when a reading first showed the app not ready after the last reading that
	// showed it ready (zero while ready, or before any reading).
	notReadySince time.Time
	// unready is why the holder gave its locks up for the app's health ("" when it did not, or
	// the app has been ready since).
	unready string
	// superseded is the pod's baton.dev/superseded annotation ("" when absent).
	superseded string
	// released is closed once neither reason holds; nil while the holder may acquire.
	released chan struct{}
	// stopWaiting is cancelled when a reason begins: waiting acquisitions leave the queue.
	stopWaiting context.Context
	cancel      context.CancelFunc
}

// reason says why the holder keeps away from its locks, "" when it may acquire.
func (b *holdBack) reason() string {
	var r []string
	if b.unready != "" {
		r = append(r, b.unready)
	}
	if b.superseded != "" {
		r = append(r, "superseded: "+b.superseded)
	}
	return strings.Join(r, "; ")
}

// holdBackStatus is the status of a lock while the holder keeps away from it.
func (h *Holder) holdBackStatus() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return "not queueing: " + h.back.reason() + "; queueing again once that is over"
}

// holdBackState returns, taken together, a channel that is closed once the holder may acquire
// again (nil when it may now), and a context that ends when a hold-back begins after this call:
// an acquisition started now waits with it, so that it leaves the queue then.
func (h *Holder) holdBackState() (<-chan struct{}, context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.back.released, h.waitingContextLocked()
}

// waitingContext returns a context that ends when the holder starts keeping away from its locks,
// for an acquisition to leave the queue then.
func (h *Holder) waitingContext() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waitingContextLocked()
}

func (h *Holder) waitingContextLocked() context.Context {
	if h.back.stopWaiting == nil {
		h.back.stopWaiting, h.back.cancel = context.WithCancel(context.Background())
	}
	return h.back.stopWaiting
}

// errHeldBack returns the error of a Try-mode request while the holder keeps away from its locks
// (ErrSuperseded or ErrAppNotReady, with the reason), or nil when it may acquire.
func (h *Holder) errHeldBack() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.back.released == nil:
		return nil
	case h.back.superseded != "":
		return fmt.Errorf("%w: %s", sidecarclient.ErrSuperseded, h.back.superseded)
	default:
		return fmt.Errorf("%w: %s", sidecarclient.ErrAppNotReady, h.back.unready)
	}
}

// PodReading is one reading of the sidecar's pod.
type PodReading struct {
	AppReady bool   // every app container is ready
	Detail   string // which are not, and why
	// Superseded is the pod's baton.dev/superseded annotation: "" when absent.
	Superseded string
	At         time.Time
}

// PodReading records one reading of the pod. With YieldWhenUnready, once the app has not been ready
// for that long, counted from the later of the first reading that showed it and each grant, the
// holder releases what it holds (the released event and the status give the reason) and acquires
// nothing until a reading shows the app ready. With handoff NewestRevision, while the pod is
// superseded it releases what it holds at once, leaves the queue and acquires nothing.
func (h *Holder) PodReading(r PodReading) {
	h.mu.Lock()
	b := &h.back
	wasHeldBack := b.released != nil
	if h.opts.YieldWhenUnready > 0 {
		if r.AppReady {
			b.notReadySince, b.unready = time.Time{}, ""
		} else if b.notReadySince.IsZero() {
			b.notReadySince = r.At
		}
	}
	if h.opts.Handoff == batonv1.HandoffNewestRevision {
		b.superseded = r.Superseded
	} else {
		b.superseded = ""
	}

	// What to give up now.
	var due []string
	var reason string
	if b.superseded != "" {
		reason = "superseded: " + b.superseded
		for _, id := range h.opts.LockIDs {
			if s := h.locks[id]; s.lease != nil && s.lease != s.givingUp {
				s.givingUp = s.lease
				due = append(due, id)
			}
		}
	} else if h.opts.YieldWhenUnready > 0 && !r.AppReady {
		var notReadyFor time.Duration
		for _, id := range h.opts.LockIDs {
			s := h.locks[id]
			if s.lease == nil || s.lease == s.givingUp {
				continue
			}
			since := b.notReadySince
			if s.status.HeldSince.After(since) {
				since = s.status.HeldSince
			}
			if r.At.Sub(since) >= h.opts.YieldWhenUnready {
				s.givingUp = s.lease
				due = append(due, id)
				notReadyFor = max(notReadyFor, r.At.Sub(since))
			}
		}
		if len(due) > 0 {
			b.unready = fmt.Sprintf("the app was not ready for %v (%s)", notReadyFor.Round(time.Millisecond), r.Detail)
			reason = b.unready
		}
	}

	heldBack := b.reason() != "" && !h.stopping
	switch {
	case heldBack && !wasHeldBack:
		b.released = make(chan struct{})
		if b.cancel != nil {
			b.cancel() // waiting acquisitions leave the queue
		}
		b.stopWaiting, b.cancel = context.WithCancel(context.Background())
	case !heldBack && wasHeldBack:
		close(b.released)
		b.released = nil
	}
	if h.stopping {
		due = nil
	}
	h.wg.Add(len(due)) // before Shutdown can wait (it sets stopping under mu)
	h.mu.Unlock()

	switch {
	case heldBack && !wasHeldBack:
		h.log.Info("keeping away from the locks", "reason", reason)
	case !heldBack && wasHeldBack:
		h.log.Info("taking the locks again: the pod may hold them")
	}
	for _, id := range due {
		go func() {
			defer h.wg.Done()
			h.giveUp(id, reason)
		}()
	}
}

// giveUp releases lock id, which the holder keeps away from for reason; in Blocking mode the hold
// loop then waits for the hold-back to end before it queues again.
func (h *Holder) giveUp(id, reason string) {
	ctx, cancel := context.WithTimeout(h.stopAcquiring, h.opts.ShutdownTimeout)
	defer cancel()
	h.log.Info("giving up a lock", "lock", id, "reason", reason)
	var err error
	if h.opts.Mode == batonv1.ModeTry {
		h.mu.Lock()
		lease := h.locks[id].givingUp
		h.mu.Unlock()
		err = h.release(ctx, id, lease, reason)
	} else {
		_, err = h.yield(ctx, id, 0, reason)
	}
	if err != nil && ctx.Err() == nil {
		h.log.Info("giving up a lock failed", "lock", id, "err", err.Error())
	}
}
