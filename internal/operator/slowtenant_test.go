package operator_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/devcluster"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// fakeTarPit is a test fake of a hung Cassandra contact point: a loopback listener that accepts
// every TCP connection and never answers, so a client waits for its own timeout.
type fakeTarPit struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// tarPitHost is the address of the i-th tar pit (0 to tarPits-1): 127.0.1.<i+1> on Cassandra's
// default port, which the test cluster's operator allows (--cassandra-allowed-hosts, main_test.go)
// and where nothing else listens (the test nodes listen on 127.0.0.1).
func tarPitHost(i int) string { return fmt.Sprintf("127.0.1.%d", i+1) }

// tarPits is how many tar pits TestSlowTenantDoesNotStallRevocation starts.
const tarPits = 10

// startFakeTarPit listens on tarPitHost(i), port 9042, until the test ends.
func startFakeTarPit(t *testing.T, i int) *fakeTarPit {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(tarPitHost(i), "9042"))
	if err != nil {
		t.Fatalf("tar pit %d: %v (another process listens on port 9042 of every loopback address?)", i, err)
	}
	p := &fakeTarPit{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *fakeTarPit) addr() string { return p.ln.Addr().String() }

// TestSlowTenantDoesNotStallRevocation: ten DistributedLocks whose contact points accept TCP and
// never answer (another tenant's hung Cassandra) do not delay a revocation on a healthy lock in
// another namespace: it lands within a lease of the healthy lock (its revoked holder learns of it
// at its next renewal, and the next waiter is granted one lease later: a revocation held up by
// more than a lease more than doubles that hand-off), both while the hung stores are first tried
// and once each of them has failed.
func TestSlowTenantDoesNotStallRevocation(t *testing.T) {
	env := up(t)
	const lease = 3 * time.Second // newLock's
	healthyNS := newNamespace(t, env, "healthy")
	ids := []string{"r0", "r1", "r2"}
	create(t, env, newLock(healthyNS, "orders", func(d *batonv1.DistributedLock) { d.Spec.LockIDs = ids }))
	waitCondition(t, env, healthyNS, "orders", batonv1.ConditionStoreReachable, metav1.ConditionTrue, "Read")

	// Holders of every lock ID, straight on the lock store (the operator created its schema).
	store, err := cassandrastore.New(context.Background(), cassandra.Session(t), cassandrastore.WithKeyspace(keyspace))
	if err != nil {
		t.Fatal(err)
	}
	owner, err := lock.NewOwner(sidecarcontract.OwnerIdentity(healthyNS, "holder", "uid-1"))
	if err != nil {
		t.Fatal(err)
	}
	locker, err := lock.New(store, owner, lock.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]int64{}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		l, err := locker.Acquire(ctx, sidecarcontract.StoreLockID(batonv1.ScopeNamespace, healthyNS, id))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Release(context.Background()) })
		tokens[id] = l.Token()
	}

	baseline := revokeAndMeasure(t, env, store, healthyNS, "orders", "r0", tokens["r0"])
	t.Logf("revocation with no hung store: landed after %v", baseline)

	tenantNS := newNamespace(t, env, "tarpit")
	var names []string
	var pits []*fakeTarPit
	for i := range tarPits {
		pit := startFakeTarPit(t, i)
		name := fmt.Sprintf("hung-%d", i)
		names, pits = append(names, name), append(pits, pit)
		dl := newLock(tenantNS, name, func(d *batonv1.DistributedLock) {
			d.Spec.Cassandra = &batonv1.CassandraConnection{ContactPoints: []string{pit.addr()}}
		})
		create(t, env, dl)
		// Deleted before the listeners close, so that later tests do not meet these locks.
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), dl) })
	}

	// While the hung stores are first tried.
	during := revokeAndMeasure(t, env, store, healthyNS, "orders", "r1", tokens["r1"])
	t.Logf("revocation while ten hung stores are first tried: landed after %v", during)
	if limit := baseline + lease; during > limit {
		t.Errorf("revocation while ten hung stores are first tried landed after %v, more than the usual %v plus a lease (%v)", during, baseline, lease)
	}

	// Once every hung store has failed (and is tried again now and then).
	for _, name := range names {
		waitConditionWithin(t, env, tenantNS, name, batonv1.ConditionStoreReachable, metav1.ConditionFalse, controllers.ReasonStoreUnreachable, 3*time.Minute)
	}
	// The status says why (the driver's error, whose wording varies with the step that timed
	// out, naming the contact point) and when the store is tried again (or, during a retry, since
	// when it is).
	hung := &batonv1.DistributedLock{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: tenantNS, Name: names[0]}, hung); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(hung.Status.Conditions, batonv1.ConditionStoreReachable)
	for _, want := range []string{pits[0].addr(), "unable to create session", "failed attempt(s) in a row since", "the operator "} {
		if c == nil || !strings.Contains(c.Message, want) {
			t.Errorf("StoreReachable of a hung store %+v lacks %q", c, want)
		}
	}
	if c != nil && !strings.Contains(c.Message, "tries again at") && !strings.Contains(c.Message, "is trying again since") {
		t.Errorf("StoreReachable of a hung store %q says neither when it is tried again nor since when", c.Message)
	}
	after := revokeAndMeasure(t, env, store, healthyNS, "orders", "r2", tokens["r2"])
	t.Logf("revocation after ten hung stores failed: landed after %v", after)
	if limit := baseline + lease; after > limit {
		t.Errorf("revocation after ten hung stores failed landed after %v, more than the usual %v plus a lease (%v)", after, baseline, lease)
	}
}

// revokeAndMeasure annotates DistributedLock ns/name to revoke lockID's grant with token and
// returns how long until the lock store shows that grant revoked (polled every 25 ms, so the
// result is late by up to that much). It waits up to three minutes, to tell how late a late
// revocation was.
func revokeAndMeasure(t *testing.T, env *devcluster.Cluster, store lock.Store, ns, name, lockID string, token int64) time.Duration {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%s=%d"}}}`, batonv1.AnnotationRevoke, lockID, token)
	dl := &batonv1.DistributedLock{}
	dl.Namespace, dl.Name = ns, name
	if err := env.Client.Patch(context.Background(), dl, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	storeID := sidecarcontract.StoreLockID(batonv1.ScopeNamespace, ns, lockID)
	return testenv.WaitFor(t, fmt.Sprintf("lock %s token %d revoked in the store", lockID, token), 3*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := lock.Inspect(ctx, store, storeID)
		return err == nil && s.Record.Token == token && s.Record.Revoked
	})
}

// waitConditionWithin is waitCondition with another bound.
func waitConditionWithin(t *testing.T, env *devcluster.Cluster, ns, name, typ string, status metav1.ConditionStatus, reason string, within time.Duration) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("condition %s=%s (%s) on %s/%s", typ, status, reason, ns, name), within, func() bool {
		dl := &batonv1.DistributedLock{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, dl); err != nil {
			return false
		}
		for _, c := range dl.Status.Conditions {
			if c.Type == typ && c.Status == status && c.Reason == reason {
				return true
			}
		}
		return false
	})
}
