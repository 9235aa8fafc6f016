package storepool

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"go.uber.org/goleak"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestPoolSharesAndClosesSessions: one session per connection, shared by every caller; a session
// unused for longer than the idle time is closed at the next call; Close closes the others. No
// goroutine of a session the pool opened is left running.
func TestPoolSharesAndClosesSessions(t *testing.T) {
	hosts := cassandra.Cluster(t).Hosts()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the node's own goroutines started above
	now := time.Now()
	p := New(WithEnsureSchema("", nil), WithIdle(time.Minute), WithConnectWait(0)) // creating the schema may take seconds
	p.now = func() time.Time { return now }
	defer p.Close()
	ctx := t.Context()
	a := cassandrastore.Connection{ContactPoints: hosts, Keyspace: "storepool_test"}
	b := a
	b.Consistency = gocql.All

	storeA, err := p.Store(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := storeA.Load(ctx, "orders", false); err != nil {
		t.Fatalf("the pooled store cannot read: %v", err)
	}
	if again, err := p.Store(ctx, a); err != nil || again != storeA {
		t.Fatalf("the same connection again: %v, %v; want the pooled store", again, err)
	}
	if _, err := p.Store(ctx, b); err != nil {
		t.Fatal(err)
	}
	if n := p.Len(); n != 2 {
		t.Fatalf("%d pooled connections for 2, want 2", n)
	}

	now = now.Add(2 * time.Minute) // a is idle now; using b sweeps it
	if _, err := p.Store(ctx, b); err != nil {
		t.Fatal(err)
	}
	if n := p.Len(); n != 1 {
		t.Fatalf("%d pooled connections after the idle one was swept, want 1", n)
	}
	p.Close()
	if _, err := p.Store(ctx, a); !errors.Is(err, ErrClosed) {
		t.Errorf("Store after Close: %v, want ErrClosed", err)
	}
}

func TestFailedConnectionIsNotKept(t *testing.T) {
	p := New()
	defer p.Close()
	// Nothing listens on port 1: the connection is refused at once.
	conn := cassandrastore.Connection{ContactPoints: []string{"127.0.0.1:1"}, Keyspace: "baton"}
	_, err := p.Store(context.Background(), conn)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error %v, want one naming the contact point", err)
	}
	if n := p.Len(); n != 0 {
		t.Errorf("%d pooled connections after a failure, want 0 (the next call must retry)", n)
	}
	bad := conn
	bad.TLS = &cassandrastore.TLS{CA: []byte("not pem")}
	if _, err := p.Store(context.Background(), bad); !errors.Is(err, cassandrastore.ErrTLSCA) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("bad CA: %v, want ErrTLSCA naming the contact point", err)
	}
}

func TestKeyTellsConnectionsApart(t *testing.T) {
	a := cassandrastore.Connection{ContactPoints: []string{"db"}, Keyspace: "baton"}
	b := a
	b.Credentials = cassandrastore.Credentials{Username: "alice", Password: "s3cret"}
	c := b
	c.Password = "other"
	d := a
	d.TLS = &cassandrastore.TLS{CA: []byte("ca")}
	keys := map[string]bool{}
	for _, conn := range []cassandrastore.Connection{a, b, c, d} {
		keys[key(conn)] = true
	}
	if len(keys) != 4 {
		t.Errorf("%d keys for 4 different connections", len(keys))
	}
	if key(a) != key(cassandrastore.Connection{ContactPoints: []string{"db"}, Keyspace: "baton"}) {
		t.Error("equal connections have different keys")
	}
}

func TestClosedPool(t *testing.T) {
	p := New()
	p.Close()
	_, err := p.Store(context.Background(), cassandrastore.Connection{ContactPoints: []string{"127.0.0.1:1"}})
	if !errors.Is(err, ErrClosed) {
		t.Errorf("error %v, want ErrClosed", err)
	}
}
