package sidecar

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
//     queue, and takes nothing. With handoff NewestRevision the holder also takes nothing before
//     its first reading: a restarted sidecar cannot know that its pod is superseded, and that it
//     stepped aside before its restart (the operator acts on that, see SteppedAside).
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
	// unread: handoff NewestRevision and no reading yet; read is closed at the first reading.
	unread bool
	read   chan struct{}
	// acquiring counts the Locker calls in flight that may grant a lock (beginAcquiring); quiet is
	// closed when it drops to zero.
	acquiring int
	quiet     chan struct{}
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
	if b.unread {
		r = append(r, notReadYet)
	}
	return strings.Join(r, "; ")
}

// notReadYet is why a holder with handoff NewestRevision takes nothing before its first reading.
const notReadYet = "the pod has not been read yet (handoff NewestRevision: the sidecar takes nothing before it knows whether its pod is superseded)"

// firstReadingWait bounds how long a Try-mode acquisition waits for the first reading of the pod
// (handoff NewestRevision) before it is refused; a reading itself times out after at most 2s
// (PodWatch).
const firstReadingWait = 5 * time.Second

// holdBackUntilRead makes a holder with handoff NewestRevision take nothing until its first
// reading of the pod (NewHolder calls it).
func (b *holdBack) holdBackUntilRead(opts Options) {
	if opts.Handoff == batonv1.HandoffNewestRevision {
		b.unread = true
		b.read, b.released = make(chan struct{}), make(chan struct{})
	}
}

// awaitFirstReading waits, with handoff NewestRevision, until the pod was read once, for at most
// firstReadingWait or until ctx ends: a Try-mode request that comes right after the sidecar
// started is not refused for that. It does not say whether a reading came.
func (h *Holder) awaitFirstReading(ctx context.Context) {
	if h.back.read == nil { // set once, in NewHolder
		return
	}
	ctx, cancel := context.WithTimeout(ctx, firstReadingWait)
	defer cancel()
	select {
	case <-h.back.read:
	case <-ctx.Done():
	}
}

// beginAcquiring counts a call of the Locker that may grant a lock as in flight, unless the
// holder keeps away from its locks: then it returns why (errHeldBack's error) and counts nothing.
// The caller calls end once the Locker's call returned. Checking and counting under one lock is
// what lets SteppedAside promise that no grant comes after it answered true.
func (h *Holder) beginAcquiring() (end func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.errHeldBackLocked(); err != nil {
		return nil, err
	}
	b := &h.back
	if b.acquiring == 0 {
		b.quiet = make(chan struct{})
	}
	b.acquiring++
	return sync.OnceFunc(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if b.acquiring--; b.acquiring == 0 {
			close(b.quiet)
		}
	}), nil
}

// SteppedAside waits until the holder keeps away from its locks because its pod carries the
// superseded mark mark, and no call of the Locker that began before is still in flight. From its
// true answer on, the holder takes no grant until a reading shows the pod without that mark: new
// acquisitions are refused (beginAcquiring), waiting ones have ended, and a grant in flight when
// their wait was cancelled was settled and given back by the Locker. It answers false when ctx
// ends first, or when the holder does not (any more) keep away for that mark. It does not say
// that the holder holds nothing: a lease granted just before the mark was read is given up by
// PodReading, in its own time.
func (h *Holder) SteppedAside(ctx context.Context, mark string) bool {
	for {
		h.mu.Lock()
		b := &h.back
		if mark == "" || b.superseded != mark || b.released == nil {
			h.mu.Unlock()
			return false
		}
		if b.acquiring == 0 {
			h.mu.Unlock()
			return true
		}
		quiet := b.quiet
		h.mu.Unlock()
		select {
		case <-quiet:
		case <-ctx.Done():
			return false
		}
	}
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
	return h.errHeldBackLocked()
}

func (h *Holder) errHeldBackLocked() error {
	switch {
	case h.back.released == nil:
		return nil
	case h.back.superseded != "":
		return fmt.Errorf("%w: %s", sidecarclient.ErrSuperseded, h.back.superseded)
	case h.back.unread:
		return fmt.Errorf("%w: not known yet: %s; ask again in a moment", sidecarclient.ErrSuperseded, notReadYet)
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
	if b.unread {
		b.unread = false
		close(b.read)
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

	heldBack := b.reason() != ""
	if h.stopping {
		// Shutting down: nothing is acquired any more, and a hold-back neither begins nor ends
		// (one that ended could let a hold loop queue in the moment before Shutdown stops it).
		heldBack = wasHeldBack
	}
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
