package localcassandra_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// The test runs its own cluster on ports and a run directory of its own,
// so that it neither clashes with nor kills the "single" and "trio" clusters
// that `go run ./hack/cassandra start` may have left running for a demo or CI.

// The three-node rig (KillNode, StartNode, NodePID, a quorum LWT with a node down) has no test
// here: lock/cassandrastore's trio tests and test/chaos drive it on trios of their own, and a
// third trio would only repeat them at about 50 s of make test.
func testSingle() localcassandra.Config { return testenv.CassandraConfig("lctest-single") }

// tWriter turns progress lines into test log lines.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startCluster starts cfg's cluster and stops it when the test ends. If it
// cannot start, the test fails under CI=true and is skipped otherwise.
func startCluster(t *testing.T, cfg localcassandra.Config) *localcassandra.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs a real Cassandra (make test runs it)")
	}
	cfg.DieWithParent = true
	cfg.Progress = tWriter{t}
	// Installing (normally a cache hit: make test runs make install-deps first) and starting
	// have bounds of their own, so a slow install never eats into the nodes' start.
	ictx, icancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer icancel()
	_, err := localcassandra.Install(ictx, cfg)
	var c *localcassandra.Cluster
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c, err = localcassandra.Start(ctx, cfg)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("start Cassandra: %v", err)
		}
		t.Skipf("cannot start a local Cassandra (needs a JDK 17+ and Maven; try `make install-deps` or `go run ./hack/cassandra install`; under CI=true this fails the test): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return c
}

func session(t *testing.T, hosts []string, cons gocql.Consistency) *gocql.Session {
	t.Helper()
	cc := gocql.NewCluster(hosts...)
	cc.Consistency = cons
	cc.Timeout = 15 * time.Second
	cc.ConnectTimeout = 5 * time.Second
	s, err := cc.CreateSession()
	if err != nil {
		t.Fatalf("connect to %v: %v", hosts, err)
	}
	t.Cleanup(s.Close)
	return s
}

func exec(t *testing.T, s *gocql.Session, stmt string) {
	t.Helper()
	if err := s.Query(stmt).Exec(); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// insertIfNotExists runs an LWT insert and returns whether it was applied.
func insertIfNotExists(t *testing.T, s *gocql.Session, table, id, val string) bool {
	t.Helper()
	stmt := fmt.Sprintf("INSERT INTO %s (id, val) VALUES (?, ?) IF NOT EXISTS", table)
	applied, err := s.Query(stmt, id, val).SerialConsistency(gocql.Serial).MapScanCAS(map[string]any{})
	if err != nil {
		t.Fatalf("%s [%s]: %v", stmt, id, err)
	}
	return applied
}

func TestSingleLWT(t *testing.T) {
	c := startCluster(t, testSingle())
	if got := c.Hosts(); len(got) != 1 || got[0] != "127.0.0.1:9242" {
		t.Fatalf("Hosts() = %v", got)
	}
	s := session(t, c.Hosts(), gocql.Quorum)

	var version string
	if err := s.Query("SELECT release_version FROM system.local").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(version, "5.0.") {
		t.Errorf("release_version = %q, want 5.0.x", version)
	}
	exec(t, s, "CREATE KEYSPACE IF NOT EXISTS lctest WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
	exec(t, s, "CREATE TABLE IF NOT EXISTS lctest.kv (id text PRIMARY KEY, val text)")
	if !insertIfNotExists(t, s, "lctest.kv", "k1", "first") {
		t.Fatal("first INSERT ... IF NOT EXISTS: [applied] = false, want true")
	}
	if insertIfNotExists(t, s, "lctest.kv", "k1", "second") {
		t.Fatal("second INSERT ... IF NOT EXISTS: [applied] = true, want false")
	}
	var val string
	if err := s.Query("SELECT val FROM lctest.kv WHERE id = ?", "k1").Consistency(gocql.Serial).Scan(&val); err != nil {
		t.Fatal(err)
	}
	if val != "first" {
		t.Fatalf("val = %q, want first", val)
	}
}
