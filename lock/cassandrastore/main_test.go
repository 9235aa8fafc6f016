package cassandrastore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// The clusters of this test binary use their own ports, so they run beside any other.
var (
	single = testenv.NewCassandra(testenv.CassandraConfig("cstore-single"))
	trio   = testenv.NewCassandra(testenv.CassandraConfig("cstore-trio"))
)

func TestMain(m *testing.M) {
	code := m.Run()
	single.Stop()
	trio.Stop()
	os.Exit(code)
}

const (
	testLease = 3 * time.Second
	keyspace  = "baton_test"
)

var schemaOnce sync.Map // cluster name → error

// newStore returns a store on a fresh session to c, creating the schema once per cluster.
func newStore(t testing.TB, c *testenv.Cassandra, replication string, hosts ...string) *cassandrastore.Store {
	t.Helper()
	session := c.Session(t, hosts...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := fmt.Sprint(c.Cluster(t).Hosts())
	v, _ := schemaOnce.LoadOrStore(key, new(sync.Once))
	v.(*sync.Once).Do(func() {
		if err := cassandrastore.EnsureSchema(ctx, session, keyspace, replication); err != nil {
			t.Fatalf("EnsureSchema: %v", err)
		}
	})
	s, err := cassandrastore.New(ctx, session, cassandrastore.WithKeyspace(keyspace))
	if err != nil {
		t.Fatalf("cassandrastore.New: %v", err)
	}
	return s
}

// newLocker returns a Locker with short test timings.
func newLocker(t testing.TB, store lock.Store, name string, opts ...lock.Option) *lock.Locker {
	t.Helper()
	owner, err := lock.NewOwner("test/" + name)
	if err != nil {
		t.Fatal(err)
	}
	base := []lock.Option{
		// A wider safety margin than the default tenth keeps timing assertions steady on a loaded
		// two-core machine: it is the slack between self-fencing and the earliest takeover.
		lock.WithLease(testLease), lock.WithSafetyMargin(testLease / 5), lock.WithPollInterval(50 * time.Millisecond),
		lock.WithWaiterPollInterval(500 * time.Millisecond), lock.WithQueueEntryTTL(3 * time.Second),
	}
	l, err := lock.New(store, owner, append(base, opts...)...)
	if err != nil {
		t.Fatalf("lock.New: %v", err)
	}
	return l
}

// lockID returns a lock ID unique to the test run.
func lockID(t testing.TB) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func release(t testing.TB, l *lock.Lease) {
	t.Helper()
	if err := l.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Errorf("release %s token %d: %v", l.LockID(), l.Token(), err)
	}
}

// grantLog checks that holds never overlap and tokens grow in grant order.
type grantLog struct {
	mu    sync.Mutex
	holds []hold
}

type hold struct {
	who        string
	token      int64
	start, end time.Time
}

func (g *grantLog) add(h hold) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holds = append(g.holds, h)
}

func (g *grantLog) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	hs := g.holds
	for i := range hs {
		for j := range hs {
			if i != j && hs[i].start.Before(hs[j].start) {
				if hs[j].start.Before(hs[i].end) {
					t.Errorf("holds overlap: %s token %d [%v] and %s token %d [%v]", hs[i].who, hs[i].token,
						hs[i].end.Sub(hs[i].start), hs[j].who, hs[j].token, hs[j].end.Sub(hs[j].start))
				}
				if hs[j].token <= hs[i].token {
					t.Errorf("token did not grow: %s got %d after %s got %d", hs[j].who, hs[j].token, hs[i].who, hs[i].token)
				}
			}
		}
	}
}

// proxied returns hosts and a session option that route every connection to node through proxy.
func proxied(proxy *testenv.Proxy) (string, func(*gocql.ClusterConfig)) {
	host, portStr, _ := net.SplitHostPort(proxy.Addr())
	port, _ := strconv.Atoi(portStr)
	return proxy.Addr(), func(cc *gocql.ClusterConfig) {
		cc.DisableInitialHostLookup = true
		cc.AddressTranslator = gocql.AddressTranslatorFunc(func(net.IP, int) (net.IP, int) {
			return net.ParseIP(host), port
		})
	}
}
