package controllers_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/storepool"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock/memstore"
)

// warnings counts the Warning Events of reason recorded so far.
func (e *events) warnings(reason string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, s := range e.list {
		if strings.HasPrefix(s, "Warning "+reason+" ") {
			n++
		}
	}
	return n
}

// TestUnreachableContactPointRaisesOneWarning: the operator's own lock store source (the real
// connection pool) for a DistributedLock whose contact point does not answer (a loopback port
// nothing listens on): once the pool's first connection failed, StoreReachable turns False and
// one Warning StoreUnreachable Event says why; the reconciles that find it still unreachable
// (the operator's polls) raise no more. On the real API server; no Cassandra involved.
func TestUnreachableContactPointRaisesOneWarning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	d := newDeputy(t, closed)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The lock brings its own login, as every lock must without --cassandra-allow-anonymous: the
	// operator then connects, and finds nothing listening.
	d.secret(t, "tenant-login", map[string]string{"username": "tenant", "password": "tenant-password"},
		map[string]string{batonv1.LabelCassandraSecret: "true"})
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "unreachable"},
		Spec: batonv1.DistributedLockSpec{LockIDs: []string{"orders"},
			Cassandra: &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "tenant-login"}}}}
	if err := d.c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	r := &controllers.DistributedLockReconciler{Client: d.c, Stores: d.src, Recorder: d.events, Config: d.src.Config, Interval: time.Hour}
	reconcile := func() *metav1.Condition {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
			t.Fatal(err)
		}
		got := &batonv1.DistributedLock{}
		if err := d.c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, batonv1.ConditionStoreReachable)
	}
	var cond *metav1.Condition
	testenv.WaitFor(t, "StoreReachable False", time.Minute, func() bool {
		cond = reconcile()
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	if cond.Reason != controllers.ReasonStoreUnreachable || !strings.Contains(cond.Message, closed) {
		t.Errorf("StoreReachable %s %s: %s; want reason %s naming %s", cond.Status, cond.Reason, cond.Message, controllers.ReasonStoreUnreachable, closed)
	}
	for range 5 { // the operator's polls while the store stays unreachable
		reconcile()
	}
	if n := d.events.warnings(controllers.ReasonStoreUnreachable); n != 1 {
		t.Fatalf("%d Warning %s Events after the lock's store was found unreachable and polled 5 times, want 1:\n%s",
			n, controllers.ReasonStoreUnreachable, d.events)
	}
	if !d.events.find(controllers.ReasonStoreUnreachable, closed) {
		t.Errorf("the Warning does not name the contact point %s:\n%s", closed, d.events)
	}
}

// TestUnreachableStoreRaisesOneWarning: a lock whose store never answers (still connecting, then
// failing) raises one Warning StoreUnreachable Event when it fails, not one per reconcile while it
// keeps failing, and another once it failed again after being read.
func TestUnreachableStoreRaisesOneWarning(t *testing.T) {
	c, ns := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "never-reached"},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"orders"}},
	}
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	connecting := errors.Join(storepool.ErrConnecting, errors.New("to Cassandra [10.0.0.1:9042] keyspace baton"))
	failing := func(n int) error {
		return &storepool.RetryError{Target: "Cassandra [10.0.0.1:9042] keyspace baton", Failures: n, Since: now.Add(-10 * time.Second),
			RetryAt: now.Add(time.Duration(n) * time.Second), Err: errors.New("dial tcp 10.0.0.1:9042: connect: connection refused")}
	}
	rec := &events{}
	mem := memstore.New()
	for i, step := range []struct {
		stores controllers.StoreSource
		want   int
	}{
		{failingSource{connecting}, 0},
		{failingSource{failing(1)}, 1},
		{failingSource{failing(2)}, 1},
		{failingSource{failing(3)}, 1},
		{source{mem.Client(1, memstore.Faults{})}, 1},
		{failingSource{failing(1)}, 2},
		{failingSource{failing(2)}, 2},
	} {
		r := &controllers.DistributedLockReconciler{Client: c, Recorder: rec, Interval: time.Hour, Stores: step.stores, Now: func() time.Time { return now }}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
		if got := rec.warnings(controllers.ReasonStoreUnreachable); got != step.want {
			t.Fatalf("after reconcile %d: %d Warning %s Events, want %d:\n%s", i, got, controllers.ReasonStoreUnreachable, step.want, rec)
		}
	}
	if !rec.find(controllers.ReasonStoreUnreachable, "connection refused") {
		t.Errorf("the Warning does not say why:\n%s", rec)
	}
}
