package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// InCI reports whether the tests run in CI (CI=true), where missing components fail tests.
func InCI() bool { return os.Getenv("CI") == "true" }

const (
	// InstallTimeout bounds installing one component (Cassandra's jars, the control plane,
	// kubectl, helm) when a test binary finds it missing. make test installs everything before
	// any test binary starts (make install-deps), so this is normally a cache hit.
	InstallTimeout = 45 * time.Minute
	// cassandraStartTimeout bounds starting an installed cluster (localcassandra's own wait for
	// the nodes is 3 minutes by default).
	cassandraStartTimeout = 5 * time.Minute
	// kubeStartTimeout bounds starting an installed control plane.
	kubeStartTimeout = 5 * time.Minute
)

// Cassandra is a local cluster shared by the tests of one binary.
type Cassandra struct {
	cfg     localcassandra.Config
	once    sync.Once
	started atomic.Bool // a start was asked for (Cluster or Prestart)
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
// the cluster cannot start, and skips it elsewhere. The cluster is running when Cluster returns, so
// a deadline the caller starts afterwards covers only its own work.
func (c *Cassandra) Cluster(t testing.TB) *localcassandra.Cluster {
	t.Helper()
	SkipShort(t, "a real Cassandra")
	c.started.Store(true)
	c.once.Do(func() { c.cluster, c.err = c.start() })
	if c.err != nil {
		msg := fmt.Sprintf("Cassandra cluster %q: %v\n"+
			"Cassandra is installed from Maven Central and needs java (17+) and mvn on PATH; make test installs it "+
			"before the tests (make install-deps, or go run ./hack/cassandra install)", c.cfg.Name, c.err)
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return c.cluster
}

// Prestart starts the cluster in the background, so that its start overlaps other set-up work
// (a JVM takes most of a core for several seconds) instead of a test's own time; Cluster then
// waits for it and reports its failure. It does nothing under -short or when a start was asked for
// already.
func (c *Cassandra) Prestart() {
	if testing.Short() || c.started.Swap(true) {
		return
	}
	go c.once.Do(func() { c.cluster, c.err = c.start() })
}

// start installs (normally a cache hit: make test runs make install-deps first) and then starts
// the cluster, each step with a bound of its own, so that a slow install never eats into the time
// the nodes have to come up.
func (c *Cassandra) start() (*localcassandra.Cluster, error) {
	ictx, cancel := context.WithTimeout(context.Background(), InstallTimeout)
	defer cancel()
	if _, err := localcassandra.Install(ictx, c.cfg); err != nil {
		return nil, fmt.Errorf("not installed: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cassandraStartTimeout)
	defer cancel()
	cluster, err := localcassandra.Start(sctx, c.cfg)
	if err != nil {
		return nil, fmt.Errorf("did not start: %w", err)
	}
	return cluster, nil
}

// Stop stops the cluster if it was started. Call it from TestMain after m.Run.
func (c *Cassandra) Stop() {
	if !c.started.Load() {
		return
	}
	c.once.Do(func() {}) // waits for a start in progress (Prestart)
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

// SkipShort skips the test under -short (make test-short), the quick loop that needs no real
// Cassandra, control plane or client tools: what names the component the test needs.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: this test needs %s (make test runs it)", what)
	}
}
