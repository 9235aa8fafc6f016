package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// TestKubectlGetAfterReconcile: once the operator has reconciled a lock, the table the real API
// server renders for `kubectl get dlock` (no -o wide) has a READY column, and LOCKS lists the
// lock IDs as plain text ("orders,billing", not a JSON array). A reconcile that finds nothing
// new writes nothing: the text adds no status write at rest.
func TestKubectlGetAfterReconcile(t *testing.T) {
	c, ns := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl, mem, held := lockWithHolder(ctx, t, c, ns, "work", "orders", "billing")
	r := &controllers.DistributedLockReconciler{Client: c, Recorder: &events{}, Interval: time.Hour, Stores: source{mem.Client(9, memstore.Faults{})}}
	reconcile := func() string {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		got := &batonv1.DistributedLock{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
			t.Fatal(err)
		}
		return got.ResourceVersion
	}
	first := reconcile()

	table := kube.Table(ctx, t, "/apis/baton.dev/v1/namespaces/"+ns+"/distributedlocks")
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	header, row := table.Header, table.Rows[0]
	if want := []string{"NAME", "READY", "LOCKS", "HOLDER", "TOKEN", "WAITING", "AGE"}; !reflect.DeepEqual(header, want) {
		t.Errorf("kubectl get dlock columns %v, want %v", header, want)
	}
	for col, want := range map[string]string{"NAME": "work", "READY": "True", "LOCKS": "orders,billing", "HOLDER": "worker-0", "TOKEN": fmt.Sprint(held.Token()), "WAITING": "0"} {
		if row[col] != want {
			t.Errorf("column %s = %q, want %q (row %v)", col, row[col], want, row)
		}
	}

	// The cache may lag (the reconciler reads through c, which reads the API server here), but
	// with nothing changed in the store a second reconcile must not write status.
	if again := reconcile(); again != first {
		t.Errorf("a reconcile with nothing new wrote status: resourceVersion %s -> %s", first, again)
	}
}

// lockWithHolder creates DistributedLock name in ns with lockIDs and an in-memory lock store in
// which worker-0 of ns holds the first lock ID (held) until the test ends.
func lockWithHolder(ctx context.Context, t *testing.T, c client.Client, ns, name string, lockIDs ...string) (_ *batonv1.DistributedLock, _ *memstore.Store, held *lock.Lease) {
	t.Helper()
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       batonv1.DistributedLockSpec{LockIDs: lockIDs},
	}
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	mem := memstore.New()
	held, err := newLocker(t, mem.Client(1, memstore.Faults{}), ns+"/worker-0/uid-0").
		Acquire(ctx, sidecarcontract.StoreLockID(batonv1.ScopeNamespace, ns, lockIDs[0]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	return dl, mem, held
}
