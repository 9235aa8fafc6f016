package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/localcassandra"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// InCI reports whether the tests run in CI (CI=true), where missing components fail tests.
func InCI() bool { return os.Getenv("CI") == "true" }

// Cassandra is a local cluster shared by the tests of one binary.
type Cassandra struct {
	cfg     localcassandra.Config
	once    sync.Once
	cluster *localcassandra.Cluster
	err     error
}

// NewCassandra describes a cluster; nothing starts until a test asks for it.
func NewCassandra(cfg localcassandra.Config) *Cassandra {
	cfg.DieWithParent = true
	if cfg.Progress == nil {
		cfg.Progress = os.Stderr
	}
	return &Cassandra{cfg: cfg}
}

// Cluster returns the running cluster, starting it on first use. It fails the test under CI when
// the cluster cannot start, and skips it elsewhere.
func (c *Cassandra) Cluster(t testing.TB) *localcassandra.Cluster {
	t.Helper()
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		c.cluster, c.err = localcassandra.Start(ctx, c.cfg)
	})
	if c.err != nil {
		msg := fmt.Sprintf("Cassandra cluster %q did not start: %v\n"+
			"It is installed from Maven Central and needs java (17+) and mvn on PATH; try: go run ./hack/cassandra install",
			c.cfg.Name, c.err)
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return c.cluster
}

// Stop stops the cluster if it was started. Call it from TestMain after m.Run.
func (c *Cassandra) Stop() {
	if c.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.cluster.Stop(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "stopping Cassandra cluster %q: %v\n", c.cfg.Name, err)
	}
}

// Session opens a session on the cluster (or on hosts, when given) that the test closes at its end.
func (c *Cassandra) Session(t testing.TB, hosts ...string) *gocql.Session {
	t.Helper()
	cl := c.Cluster(t)
	if len(hosts) == 0 {
		hosts = cl.Hosts()
	}
	s, err := NewSession(hosts)
	if err != nil {
		t.Fatalf("connecting to Cassandra at %v: %v", hosts, err)
	}
	t.Cleanup(func() { cassandrastore.CloseSession(s, 10*time.Second) })
	return s
}

// NewSession opens a gocql session with the settings baton's tests use.
func NewSession(hosts []string, opts ...func(*gocql.ClusterConfig)) (*gocql.Session, error) {
	cc := gocql.NewCluster(hosts...)
	cc.Timeout = 2 * time.Second
	cc.ConnectTimeout = 5 * time.Second
	cc.Consistency = gocql.Quorum
	for _, o := range opts {
		o(cc)
	}
	return cc.CreateSession()
}
