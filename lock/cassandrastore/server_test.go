package cassandrastore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestClusterName: New reads the name of the cluster it reached, accepts it when WithClusterName
// names it, and refuses another cluster with ErrClusterMismatch and a message naming both.
func TestClusterName(t *testing.T) {
	newStore(t, single, "") // schema
	session := single.Session(t)
	ctx := ctxFor(t, time.Minute)

	s, err := cassandrastore.New(ctx, session, cassandrastore.WithKeyspace(keyspace))
	if err != nil {
		t.Fatal(err)
	}
	// localcassandra names its clusters baton-<Name>.
	const want = "baton-cstore-single"
	if got := s.ClusterName(); got != want {
		t.Fatalf("ClusterName() = %q, want %q", got, want)
	}

	if _, err := cassandrastore.New(ctx, session, cassandrastore.WithKeyspace(keyspace), cassandrastore.WithClusterName(want)); err != nil {
		t.Fatalf("the right cluster name refused: %v", err)
	}

	_, err = cassandrastore.New(ctx, session, cassandrastore.WithKeyspace(keyspace), cassandrastore.WithClusterName("baton-cstore-trio"))
	if !errors.Is(err, cassandrastore.ErrClusterMismatch) {
		t.Fatalf("another cluster's name: got %v, want ErrClusterMismatch", err)
	}
	for _, part := range []string{`"baton-cstore-trio"`, `"baton-cstore-single"`, "new DistributedLock"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q lacks %s", err, part)
		}
	}
	t.Logf("refused: %v", err)

	// The mismatch is found before the schema: a keyspace without baton's tables on the wrong
	// cluster reports the mismatch, not a missing schema to wait for.
	_, err = cassandrastore.New(ctx, session, cassandrastore.WithKeyspace("no_such_keyspace"), cassandrastore.WithClusterName("elsewhere"))
	if !errors.Is(err, cassandrastore.ErrClusterMismatch) || errors.Is(err, cassandrastore.ErrSchemaMissing) {
		t.Fatalf("wrong cluster without schema: got %v, want ErrClusterMismatch", err)
	}
}
