package storepool

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

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
