package controllers_test

import (
	"context"
	"errors"
	"testing"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestConnectionPolicy is a table test of PoolSource.Connection for locks that name no Secrets
// (no API server needed): which contact points are allowed, and when the operator's own login is
// used or the lock is refused for want of credentials, and where the operator creates the schema.
func TestConnectionPolicy(t *testing.T) {
	cfg := inject.Config{Image: "baton:test"}
	cfg.Cassandra.ContactPoints, cfg.Cassandra.Keyspace = []string{"cass-0.db:9042", "cass-1.db"}, "baton"
	own := cassandrastore.Credentials{Username: "baton-operator", Password: "operator-s3cret",
		TLS: &cassandrastore.TLS{CA: []byte("ca"), Cert: []byte("cert"), Key: []byte("key")}}
	for _, tc := range []struct {
		name      string
		src       controllers.PoolSource
		conn      *batonv1.CassandraConnection
		refused   bool // with ErrConnectionNotAllowed
		ownLogin  bool
		caOnly    bool
		anonymous bool
		schema    bool // EnsuresSchema
	}{
		{name: "defaults", ownLogin: true, schema: true},
		{name: "a default host alone: no operator login", conn: &batonv1.CassandraConnection{ContactPoints: []string{"CASS-1.db.:9042"}}, refused: true},
		{name: "one default host, normalised, anonymous allowed", src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"CASS-1.db:9042"}}, anonymous: true},
		// A relative name goes through the resolver's search domains (the pod's namespace first),
		// an absolute one does not: they may name different hosts.
		{name: "an absolute name is not the relative one listed", src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-1.db.:9042"}}, refused: true},
		{name: "a relative name is not the absolute one listed", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"cass-eu.db."}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db"}}, refused: true},
		{name: "an IPv6 address in another spelling", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"[2001:db8::1]:9042"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"[2001:0DB8:0:0::0:1]", "2001:db8::1"}}, anonymous: true},
		{name: "an IPv4 address mapped to IPv6", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"198.18.0.1"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"[::ffff:198.18.0.1]:9042"}}, anonymous: true},
		{name: "another port", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"198.18.0.1"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"198.18.0.1:9043"}}, refused: true},
		{name: "a host off the list", src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-0.db:9042", "evil.example:9042"}}, refused: true},
		{name: "a listed host", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"cass-eu.db"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"cass-eu.db:9042"}}, anonymous: true},
		{name: "the list replaces the default", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"cass-eu.db"}},
			refused: true},
		{name: "any host", src: controllers.PoolSource{AllowAnonymous: true, AllowedContactPoints: []string{"*"}},
			conn: &batonv1.CassandraConnection{ContactPoints: []string{"evil.example"}}, anonymous: true},
		{name: "another keyspace", conn: &batonv1.CassandraConnection{Keyspace: "shop"}, refused: true},
		{name: "another keyspace, anonymous allowed", src: controllers.PoolSource{AllowAnonymous: true},
			conn: &batonv1.CassandraConnection{Keyspace: "shop"}, caOnly: true},
		{name: "one of the operator's keyspaces", src: controllers.PoolSource{OperatorKeyspaces: []string{"baton", "shop"}},
			conn: &batonv1.CassandraConnection{Keyspace: "shop"}, ownLogin: true, schema: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			src.Config, src.Defaults = cfg, own
			dl := &batonv1.DistributedLock{Spec: batonv1.DistributedLockSpec{LockIDs: []string{"x"}, Cassandra: tc.conn}}
			dl.Namespace, dl.Name = "shop", "x"
			got, err := src.Connection(context.Background(), dl)
			if tc.refused {
				if !errors.Is(err, controllers.ErrConnectionNotAllowed) {
					t.Fatalf("error %v, want ErrConnectionNotAllowed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := src.EnsuresSchema(got); s != tc.schema {
				t.Errorf("EnsuresSchema = %v, want %v", s, tc.schema)
			}
			switch {
			case tc.ownLogin:
				if got.Username != own.Username || got.TLS != own.TLS {
					t.Errorf("credentials %v, want the operator's", got.Credentials)
				}
			case tc.caOnly:
				if got.Username != "" || got.TLS == nil || string(got.TLS.CA) != "ca" || got.TLS.Cert != nil {
					t.Errorf("credentials %v, want the operator's CA alone", got.Credentials)
				}
			case tc.anonymous:
				if got.Username != "" || got.TLS != nil {
					t.Errorf("credentials %v, want none", got.Credentials)
				}
			}
		})
	}
}
