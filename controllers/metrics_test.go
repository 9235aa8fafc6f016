package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	// A second set on the same registry takes the first one over instead of failing.
	again := NewMetrics()
	if err := again.Register(reg); err != nil {
		t.Fatalf("registering twice: %v", err)
	}
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	locks := []batonv1.LockStatus{{LockID: "orders", Holder: "web-1", Token: 7, Waiting: 2}, {LockID: "audit"}}
	again.observe(dl, locks, []holderChange{{LockID: "orders", NewHolder: "shop/web-1", NewToken: 7}})
	m.revoked(dl, "orders")

	want := `
# HELP baton_distributedlock_held 1 when the lock store shows a holder for the lock, else 0.
# TYPE baton_distributedlock_held gauge
baton_distributedlock_held{distributedlock="orders",lock="audit",namespace="shop"} 0
baton_distributedlock_held{distributedlock="orders",lock="orders",namespace="shop"} 1
# HELP baton_distributedlock_token Fencing token of the lock's current (or last) grant.
# TYPE baton_distributedlock_token gauge
baton_distributedlock_token{distributedlock="orders",lock="audit",namespace="shop"} 0
baton_distributedlock_token{distributedlock="orders",lock="orders",namespace="shop"} 7
# HELP baton_distributedlock_holder_changes_total Grants to a new holder seen by the operator (it may miss changes between reconciles).
# TYPE baton_distributedlock_holder_changes_total counter
baton_distributedlock_holder_changes_total{distributedlock="orders",lock="orders",namespace="shop"} 1
# HELP baton_distributedlock_revocations_total Grants revoked through the baton.dev/revoke annotation.
# TYPE baton_distributedlock_revocations_total counter
baton_distributedlock_revocations_total{distributedlock="orders",lock="orders",namespace="shop"} 1
`
	names := []string{"baton_distributedlock_held", "baton_distributedlock_token", "baton_distributedlock_holder_changes_total", "baton_distributedlock_revocations_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.waiting.WithLabelValues("shop", "orders", "orders")); got != 2 {
		t.Errorf("waiting = %v, want 2", got)
	}
	m.unreachable(dl)
	if got := testutil.ToFloat64(m.reachable.WithLabelValues("shop", "orders")); got != 0 {
		t.Errorf("store_reachable = %v after unreachable, want 0", got)
	}
	m.forget("shop", "orders")
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("%d series left after forget (%v), want 0", n, err)
	}
	var none *Metrics
	none.observe(dl, locks, nil) // a nil *Metrics records nothing and does not panic
}

// TestStoreRequestsCounted: the reconciler's reads of a lock (lock.Inspect: the owner record and
// the queue) and a revocation's requests are counted per DistributedLock, and forget drops them.
// The in-memory store.
func TestStoreRequestsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	store := m.counted(dl, memstore.New().Client(1, memstore.Faults{}))
	for range 3 {
		if _, err := lock.Inspect(context.Background(), store, "orders"); err != nil {
			t.Fatal(err)
		}
	}
	if err := lock.Revoke(context.Background(), store, "orders", 7); !errors.Is(err, lock.ErrNotHolder) {
		t.Fatalf("revoking a grant that does not exist: %v, want ErrNotHolder", err)
	}
	reads := testutil.ToFloat64(m.storeRequests.WithLabelValues("shop", "orders", "read"))
	writes := testutil.ToFloat64(m.storeRequests.WithLabelValues("shop", "orders", "write"))
	if reads != 7 || writes != 0 {
		t.Errorf("reads %v, writes %v; want 7 (3 inspections of 2 reads, 1 linearizable read of the revocation) and 0", reads, writes)
	}
	m.forget("shop", "orders")
	if n, err := testutil.GatherAndCount(reg, metricStoreRequests); err != nil || n != 0 {
		t.Errorf("%d store request series left after forget (%v), want 0", n, err)
	}
	var none *Metrics
	if got := none.counted(dl, store); got != store {
		t.Errorf("a nil *Metrics wrapped the store: %T", got)
	}
}
