package inject_test

import (
	"testing"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
)

// TestTLSServerNameReachesTheSidecar: the operator's TLS server name (public) reaches the sidecar
// of a lock that keeps the operator's contact points and turns TLS on with its own tlsSecretRef;
// a lock's own tlsServerName wins; a lock on other contact points does not get the operator's;
// without TLS there is none. No Secret of the operator's is ever mounted.
func TestTLSServerNameReachesTheSidecar(t *testing.T) {
	cfg := inject.Config{Image: "baton:test"}
	cfg.Cassandra.ContactPoints, cfg.Cassandra.TLSServerName = []string{"cassandra.db.svc"}, "cassandra.db.svc"
	tlsRef := &batonv1.TLSSecretRef{Name: "db"}
	for _, tc := range []struct {
		name string
		conn *batonv1.CassandraConnection
		want string // "": no variable
	}{
		{"the operator's servers over TLS", &batonv1.CassandraConnection{TLSSecretRef: tlsRef}, "cassandra.db.svc"},
		{"the lock's own server name", &batonv1.CassandraConnection{TLSSecretRef: tlsRef, TLSServerName: "node.db"}, "node.db"},
		{"other servers", &batonv1.CassandraConnection{TLSSecretRef: tlsRef, ContactPoints: []string{"eu.db"}}, ""},
		{"other servers, their name", &batonv1.CassandraConnection{TLSSecretRef: tlsRef, ContactPoints: []string{"eu.db"}, TLSServerName: "eu.db"}, "eu.db"},
		{"no TLS", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dl := validLock()
			dl.Spec.Cassandra = tc.conn
			pod, err := inject.Inject(appPod(), dl, cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, found := "", false
			for _, e := range sidecarOf(t, pod).Env {
				if e.Name == "BATON_CASSANDRA_TLS_SERVER_NAME" {
					got, found = e.Value, true
				}
			}
			if got != tc.want || found != (tc.want != "") {
				t.Errorf("BATON_CASSANDRA_TLS_SERVER_NAME = %q (set: %v), want %q", got, found, tc.want)
			}
			for _, v := range pod.Spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName != "db" {
					t.Errorf("volume %s mounts Secret %s, not the lock's", v.Name, v.Secret.SecretName)
				}
			}
		})
	}
}
