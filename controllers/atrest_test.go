package controllers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/lock/memstore"
)

// statusRequests is a client that counts the status writes it sends to the API server.
type statusRequests struct {
	client.Client
	n atomic.Int32
}

func (c *statusRequests) Status() client.SubResourceWriter {
	return countedStatus{c.Client.Status(), &c.n}
}

type countedStatus struct {
	client.SubResourceWriter
	n *atomic.Int32
}

func (s countedStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.n.Add(1)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (s countedStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.n.Add(1)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

// TestNoStatusRequestAtRest: reconciles of a held lock whose store did not change send the API
// server no status request at all, not even one it finds changes nothing, and ask for the next
// read at the safety refresh, jittered, with low priority. The grant's time in the
// store is finer than the second the API server keeps (Cassandra keeps milliseconds, the in-memory
// store used here nanoseconds). On the real API server.
func TestNoStatusRequestAtRest(t *testing.T) {
	c, ns := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl, mem, _ := lockWithHolder(ctx, t, c, ns, "quiet", "orders")
	counting := &statusRequests{Client: c}
	r := &controllers.DistributedLockReconciler{Client: counting, Recorder: &events{}, Interval: time.Hour, Stores: source{mem.Client(9, memstore.Faults{})}}
	reconcile := func() {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)})
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		// The safety refresh: the interval ±10 %, behind every change in the work queue.
		if res.RequeueAfter < 54*time.Minute || res.RequeueAfter > 66*time.Minute || res.Priority == nil || *res.Priority != handler.LowPriority {
			t.Errorf("reconcile of a lock at rest: requeue after %v with priority %v, want 54m to 66m with priority %d",
				res.RequeueAfter, ptr.Deref(res.Priority, 0), handler.LowPriority)
		}
	}
	reconcile()
	if n := counting.n.Load(); n != 1 {
		t.Fatalf("%d status requests for the first reconcile, want 1", n)
	}
	const again = 3
	for range again {
		reconcile()
	}
	if n := counting.n.Load() - 1; n != 0 {
		t.Errorf("%d status requests in %d reconciles that found nothing new, want 0", n, again)
	}
}
