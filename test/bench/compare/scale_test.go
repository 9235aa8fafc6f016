package compare_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/hintudp"
	"github.com/baton-dev/baton/test/bench/compare"
)

// TestScaleSlice is make test's slice of the scale measurement: ten locks of three contenders at
// the default lease, as three pods' worth of lock clients (each with its own store session and
// UDP hint socket, shared by its ten locks), on this binary's Cassandra node. It fails when a role's
// store load, counted by the contenders, exceeds twice its budget with hints working (issue 26:
// holder 0.3, head 1, other waiters 0.2 requests/s), or when Cassandra's own count of every
// request on the node (system_views.clients: driver heartbeats and the measuring reads included)
// exceeds twice the lock's budget of 1.5 requests/s. Its figures are logged; `make bench-scale`
// runs the full measurement.
func TestScaleSlice(t *testing.T) {
	const (
		hintedHolderLoad = 0.3
		hintedHeadLoad   = 1.0
		hintedWaiterLoad = 0.2
		hintedLockLoad   = 1.5 // a Lease election's cost, every request Cassandra serves the lock
	)
	e := setup(t, 3)
	ctx := ctxFor(t, 3*time.Minute)
	hinters := make([]lock.Hinter, len(e.stores))
	for i := range hinters {
		h, err := hintudp.New(ctx, hintudp.Config{Bind: "127.0.0.1:0", AllowLoopback: true, Log: logr.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		hinters[i] = h
	}
	sys, err := compare.NewBatonHinters("baton, UDP hints", e.stores, lock.DefaultLease, hinters, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	counter := cassandra.Session(t)
	res, err := compare.Scale(ctx, sys, uniqueID("scale"), compare.ScaleConfig{
		Locks: 10, Contenders: 3, Lease: lock.DefaultLease,
		Settle: 3 * time.Second, Window: 10 * time.Second, HandOffs: 5,
		Requests: func(ctx context.Context) (int64, error) { return nodeRequests(ctx, counter) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d locks × %d: set up in %s; store requests/s per contender, mean (max): holder %.2f (%.2f), head %.2f (%.2f), other waiters %.2f (%.2f); per lock %.2f by the contenders' count, %.2f by Cassandra's; hand-offs p50 %s, max %s",
		res.Locks, res.Contenders, res.SetUp.Round(time.Millisecond), res.Holder.Mean, res.Holder.Max, res.Head.Mean, res.Head.Max,
		res.Rest.Mean, res.Rest.Max, res.Client, res.ServerPerLock,
		compare.Percentile(res.HandOff, 50), compare.Percentile(res.HandOff, 100))
	for _, r := range []struct {
		role   string
		load   compare.RoleLoad
		budget float64
	}{
		{"holder", res.Holder, hintedHolderLoad},
		{"head", res.Head, hintedHeadLoad},
		{"other waiter", res.Rest, hintedWaiterLoad},
	} {
		if r.load.Max > 2*r.budget {
			t.Errorf("a %s made %.2f store requests/s, over twice its budget of %.2f", r.role, r.load.Max, r.budget)
		}
	}
	if res.ServerPerLock > 2*hintedLockLoad {
		t.Errorf("Cassandra counted %.2f requests/s per lock, over twice the lock's budget of %.2f", res.ServerPerLock, hintedLockLoad)
	}
	if len(res.HandOff) != 5 || res.Lost != 0 {
		t.Errorf("%d hand-offs measured and %d holders lost their lock on their own; want 5 and none", len(res.HandOff), res.Lost)
	}
}

// nodeRequests sums request_count over the connections of system_views.clients on the node s
// reaches: every request of every client, as Cassandra counts them. The table is the node's own
// (each node of a cluster counts its connections), and a connection's count leaves it with the
// connection.
func nodeRequests(ctx context.Context, s *gocql.Session) (int64, error) {
	iter := s.Query(`SELECT request_count FROM system_views.clients`).Consistency(gocql.One).IterContext(ctx)
	var sum, n int64
	for iter.Scan(&n) {
		sum += n
	}
	if err := iter.Close(); err != nil {
		return 0, fmt.Errorf("reading system_views.clients: %w", err)
	}
	return sum, nil
}
