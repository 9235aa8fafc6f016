package controllers_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestConnectionPolicy is a table test of PoolSource.Connection for locks that name no Secrets
// (no API server needed): which contact points are allowed, that the operator's own login never
// serves a lock (its sidecars would not have it), that a lock is refused for want of credentials
// or of TLS to servers the operator reaches over TLS, and that the lock's connection never
// creates the schema (the operator's own does, see Store).
func TestConnectionPolicy(t *testing.T) {
	cfg := inject.Config{Image: "baton:test"}
	cfg.Cassandra.ContactPoints, cfg.Cassandra.Keyspace = []string{"cass-0.db:9042", "cass-1.db"}, "baton"
	ipCfg := cfg
	ipCfg.Cassandra.ContactPoints = []string{"198.18.0.1"}
	own := cassandrastore.Credentials{Username: "baton-operator", Password: "operator-s3cret"}
	ownTLS := cassandrastore.Credentials{Username: "baton-operator", Password: "operator-s3cret",
		TLS: &cassandrastore.TLS{CA: []byte("ca"), Cert: []byte("cert"), Key: []byte("key")}}
	for _, tc := range []struct {
		name    string
		src     controllers.PoolSource
		tls     bool // the operator reaches its Cassandra over TLS
		conn    *batonv1.CassandraConnection
		refused string // ErrConnectionNotAllowed, with this in its message; "": anonymous
	}{
		{name: "defaults: the operator's login is not the lock's", refused: "no Cassandra credentials"},
		{name: "defaults, anonymous allowed", src: controllers.PoolSource{AllowAnonymous: true}},
		{name: "defaults, over TLS", tls: true, src: controllers.PoolSource{AllowAnonymous: true}, refused: "over TLS"},
		// The operator's servers in any spelling, order or subset are its servers: its TLS is theirs.
		{name: "the operator's servers reordered, over TLS", tls: true, src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-1.db", "cass-0.db:9042"}}, refused: "over TLS"},
		{name: "one of the operator's servers, over TLS", tls: true, src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-1.db"}}, refused: "over TLS"},
		{name: "the operator's servers with and without the default port, over TLS", tls: true, src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-0.db", "cass-1.db:9042"}}, refused: "over TLS"},
		{name: "the operator's servers in upper case, over TLS", tls: true, src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"CASS-0.db:9042", "cass-1.db"}}, refused: "over TLS"},
		{name: "an operator's server among others, over TLS", tls: true,
			src:  controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"cass-eu.db", "cass-0.db"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db", "cass-0.db"}}, refused: "over TLS"},
		{name: "the operator's server by another spelling of its IP, over TLS", tls: true,
			src:  controllers.PoolSource{AllowAnonymous: true, Config: ipCfg},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"[::ffff:198.18.0.1]:9042"}}, refused: "over TLS"},
		{name: "other servers, over TLS: the operator's TLS is not theirs", tls: true,
			src:  controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"cass-eu.db"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db"}}},
		{name: "a default host alone", conn: &batonv1.CassandraConnection{ContactPoints: []string{"CASS-1.db.:9042"}}, refused: "allow-list"},
		{name: "one default host, normalised, anonymous allowed", src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"CASS-1.db:9042"}}},
		// A relative name goes through the resolver's search domains (the pod's namespace first),
		// an absolute one does not: they may name different hosts.
		{name: "an absolute name is not the relative one listed", src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-1.db.:9042"}}, refused: "allow-list"},
		{name: "a relative name is not the absolute one listed", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"cass-eu.db."}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db"}}, refused: "allow-list"},
		{name: "an IPv6 address in another spelling", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"[2001:db8::1]:9042"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"[2001:0DB8:0:0::0:1]", "2001:db8::1"}}},
		{name: "an IPv4 address mapped to IPv6", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"198.18.0.1"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"[::ffff:198.18.0.1]:9042"}}},
		{name: "another port", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"198.18.0.1"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"198.18.0.1:9043"}}, refused: "allow-list"},
		{name: "a host off the list", src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-0.db:9042", "evil.example:9042"}}, refused: "allow-list"},
		{name: "a listed host", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"cass-eu.db"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db:9042"}}},
		{name: "the list replaces the default", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"cass-eu.db"}},
			refused: "allow-list"},
		{name: "any host", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"*"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"evil.example"}}},
		{name: "another keyspace", conn: &batonv1.CassandraConnection{Keyspace: "shop"}, refused: "no Cassandra credentials"},
		{name: "another keyspace, anonymous allowed", src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{Keyspace: "shop"}},
		{name: "one of the operator's keyspaces", src: controllers.PoolSource{OperatorKeyspaces: []string{"baton", "shop"}},
			conn: &batonv1.CassandraConnection{Keyspace: "shop"}, refused: "no Cassandra credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			if src.Config.Cassandra.ContactPoints == nil {
				src.Config = cfg
			}
			src.Defaults = own
			if tc.tls {
				src.Defaults = ownTLS
			}
			dl := &batonv1.DistributedLock{Spec: batonv1.DistributedLockSpec{LockIDs: []string{"x"}, Cassandra: tc.conn}}
			dl.Namespace, dl.Name = "shop", "x"
			got, err := src.Connection(context.Background(), dl)
			if tc.refused != "" {
				if !errors.Is(err, controllers.ErrConnectionNotAllowed) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("error %v, want ErrConnectionNotAllowed saying %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Username != "" || got.TLS != nil {
				t.Errorf("credentials %v, want none (as the sidecars have)", got.Credentials)
			}
			if src.EnsuresSchema(got) {
				t.Error("the lock's own connection creates the schema; only the operator's should")
			}
		})
	}
}

// TestSidecarConnection: a lock that names its own Secrets gets exactly what its sidecars get,
// the TLS server name included (the operator's default only on the operator's contact points),
// never the operator's login or client certificate. The Secrets come from an in-memory fake
// client (controller-runtime's fake); TestSecretsOptInByLabel reads them from a real API server.
func TestSidecarConnection(t *testing.T) {
	cfg := inject.Config{Image: "baton:test"}
	cfg.Cassandra.ContactPoints, cfg.Cassandra.Keyspace, cfg.Cassandra.TLSServerName = []string{"cass-0.db"}, "baton", "cassandra.db.svc"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", Labels: map[string]string{batonv1.LabelCassandraSecret: "true"}},
		Data: map[string][]byte{"username": []byte("tenant_shop"), "password": []byte("shop-s3cret"), "ca.crt": []byte("the CA")}}
	src := controllers.PoolSource{Config: cfg, Secrets: fake.NewClientBuilder().WithObjects(secret).Build(),
		Defaults:             cassandrastore.Credentials{Username: "baton-operator", Password: "operator-s3cret", TLS: &cassandrastore.TLS{CA: []byte("the CA"), Cert: []byte("op-cert"), Key: []byte("op-key"), ServerName: "cassandra.db.svc"}},
		AllowedContactPoints: []string{"cass-0.db", "cass-eu.db"}}
	refs := func(c batonv1.CassandraConnection) *batonv1.CassandraConnection {
		c.CredentialsSecretRef, c.TLSSecretRef = &batonv1.CredentialsSecretRef{Name: "db"}, &batonv1.TLSSecretRef{Name: "db"}
		return &c
	}
	for _, tc := range []struct {
		name       string
		conn       *batonv1.CassandraConnection
		serverName string
	}{
		{"the operator's servers and keyspace", refs(batonv1.CassandraConnection{}), "cassandra.db.svc"},
		{"the operator's servers, the lock's server name", refs(batonv1.CassandraConnection{TLSServerName: "other.db"}), "other.db"},
		{"the operator's servers spelled otherwise", refs(batonv1.CassandraConnection{ContactPoints: []string{"CASS-0.db:9042"}}), "cassandra.db.svc"},
		{"an operator's server among others", refs(batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db", "cass-0.db"}}), "cassandra.db.svc"},
		{"other servers", refs(batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db"}}), ""},
		{"other servers, their server name", refs(batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db"}, TLSServerName: "eu.db"}), "eu.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dl := &batonv1.DistributedLock{Spec: batonv1.DistributedLockSpec{LockIDs: []string{"x"}, Cassandra: tc.conn}}
			dl.Namespace, dl.Name = "shop", "x"
			got, err := src.Connection(context.Background(), dl)
			if err != nil {
				t.Fatal(err)
			}
			if got.Username != "tenant_shop" || got.Password != "shop-s3cret" || got.TLS == nil || string(got.TLS.CA) != "the CA" ||
				got.TLS.Cert != nil || got.TLS.ServerName != tc.serverName {
				t.Errorf("connection %#v (server name %q), want the lock's login and CA, no client certificate, server name %q",
					got, got.TLS.ServerName, tc.serverName)
			}
			if src.EnsuresSchema(got) {
				t.Error("the lock's own connection creates the schema; only the operator's should")
			}
			// The webhook injects the same: the server name reaches the sidecar, no operator Secret does.
			if s := cfg.StoreConnection(dl); s.TLSServerName != tc.serverName {
				t.Errorf("the sidecars get server name %q, the operator verifies %q", s.TLSServerName, tc.serverName)
			}
		})
	}
}

// TestOwnsOperatorServersInAnySpelling: the operator's own connection (which creates the schema)
// is used wherever a lock names any of the operator's servers, however spelled (case, default
// port, order, subset, IP form), in one of its keyspaces; never on other servers alone.
func TestOwnsOperatorServersInAnySpelling(t *testing.T) {
	cfg := inject.Config{Image: "baton:test"}
	cfg.Cassandra.ContactPoints, cfg.Cassandra.Keyspace = []string{"cass-0.db:9042", "cass-1.db", "198.18.0.1"}, "baton"
	src := controllers.PoolSource{Config: cfg}
	for _, tc := range []struct {
		hosts []string
		owns  bool
	}{
		{[]string{"cass-0.db:9042", "cass-1.db", "198.18.0.1"}, true},
		{[]string{"cass-1.db", "cass-0.db"}, true},
		{[]string{"CASS-1.DB:9042"}, true},
		{[]string{"[::ffff:198.18.0.1]:9042"}, true},
		{[]string{"cass-eu.db", "cass-0.db"}, true},
		{[]string{"cass-eu.db"}, false},
		{[]string{"cass-0.db:9043"}, false},
		{[]string{"cass-0.db."}, false}, // absolute: maybe another host
		{nil, false},
	} {
		conn := cassandrastore.Connection{ContactPoints: tc.hosts, Keyspace: "baton"}
		if got := src.Owns(conn); got != tc.owns {
			t.Errorf("Owns(%v) = %v, want %v", tc.hosts, got, tc.owns)
		}
		conn.Keyspace = "shop"
		if src.Owns(conn) {
			t.Errorf("Owns(%v) in keyspace shop, not one of the operator's", tc.hosts)
		}
	}
}
