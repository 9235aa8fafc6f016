package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// podEvents is the DistributedLock reconciler's handler of pod events. A change of a pod enqueues
// the locks it names (toRequests) at once, and again at each of the follow-ups (after, counted
// from the last change of a pod naming the lock: a debounce per lock, so a burst of changes costs
// one set of follow-ups). The follow-ups are there because a sidecar writes the lock store and its
// own pod in an order the operator cannot see: a new pod's sidecar queues after it connected to
// its store, which may be after the pod's last change, and under trafficPolicy Label queueing
// changes nothing on the pod. An update that changes nothing (the informer's periodic resync, the
// same resourceVersion) enqueues nothing; the pods of the informer's initial list get no
// follow-up.
//
// The follow-ups are timers of this handler, not the work queue's AddAfter: the queue keeps one
// entry per lock, so a delayed entry added with an immediate one would be merged into it. A
// follow-up that fires after the controller stopped adds to a queue that is shut down, which
// ignores it. Not guaranteed: that the last follow-up comes late enough for every store write
// that follows a pod change; what it misses is read at the lock's next refresh.
type podEvents struct {
	after      []time.Duration // increasing
	toRequests handler.MapFunc

	mu     sync.Mutex
	timers map[reconcile.Request]*time.Timer // the next follow-up of each lock
}

var _ handler.EventHandler = (*podEvents)(nil)

// newPodEvents returns a handler with follow-ups at the increasing durations after.
func newPodEvents(toRequests handler.MapFunc, after ...time.Duration) *podEvents {
	return &podEvents{after: after, toRequests: toRequests, timers: map[reconcile.Request]*time.Timer{}}
}

type workQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// Create implements handler.EventHandler. The pods of the informer's initial list are not
// changes: their locks are enqueued with low priority, as the DistributedLocks of the initial list
// are (each lock is read at start anyway), without a follow-up.
func (h *podEvents) Create(ctx context.Context, e event.CreateEvent, q workQueue) {
	if e.IsInInitialList {
		for _, req := range h.toRequests(ctx, e.Object) {
			addLow(q, req)
		}
		return
	}
	h.changed(ctx, q, e.Object)
}

// Update implements handler.EventHandler: both the old and the new pod's locks (a pod's
// baton.dev/lock can be edited).
func (h *podEvents) Update(ctx context.Context, e event.UpdateEvent, q workQueue) {
	if e.ObjectOld != nil && e.ObjectNew != nil && e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion() {
		return // a resync: nothing changed
	}
	h.changed(ctx, q, e.ObjectOld, e.ObjectNew)
}

// Delete implements handler.EventHandler.
func (h *podEvents) Delete(ctx context.Context, e event.DeleteEvent, q workQueue) {
	h.changed(ctx, q, e.Object)
}

// Generic implements handler.EventHandler.
func (h *podEvents) Generic(ctx context.Context, e event.GenericEvent, q workQueue) {
	h.changed(ctx, q, e.Object)
}

// changed enqueues the locks of objs now and (re)arms their follow-ups.
func (h *podEvents) changed(ctx context.Context, q workQueue, objs ...client.Object) {
	seen := map[reconcile.Request]bool{}
	for _, o := range objs {
		if o == nil {
			continue
		}
		for _, req := range h.toRequests(ctx, o) {
			if seen[req] {
				continue
			}
			seen[req] = true
			q.Add(req)
			h.followUp(q, req)
		}
	}
}

// followUp (re)arms the follow-ups of req from now, replacing those still pending for it.
func (h *podEvents) followUp(q workQueue, req reconcile.Request) {
	if len(h.after) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.timers[req]; ok {
		t.Stop()
	}
	h.armLocked(q, req, 0, 0)
}

// armLocked arms follow-up i of req, elapsed after the change it follows. h.mu is held.
func (h *podEvents) armLocked(q workQueue, req reconcile.Request, i int, elapsed time.Duration) {
	var t *time.Timer
	t = time.AfterFunc(h.after[i]-elapsed, func() {
		h.mu.Lock()
		if h.timers[req] != t {
			h.mu.Unlock()
			return // stopped too late: a newer change re-armed the follow-ups
		}
		delete(h.timers, req)
		if i+1 < len(h.after) {
			h.armLocked(q, req, i+1, h.after[i])
		}
		h.mu.Unlock()
		q.Add(req)
	})
	h.timers[req] = t
}

// pending is the number of locks with a follow-up not yet fired (for tests).
func (h *podEvents) pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.timers)
}

// addLow adds req to q with handler.LowPriority when q is a priority queue (controller-runtime's
// default), behind every request of normal priority; plainly otherwise.
func addLow(q workQueue, req reconcile.Request) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, req)
		return
	}
	q.Add(req)
}
