package operator_test

import (
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/operator"
)

// TestTLSServerNameFlag: --cassandra-tls-server-name sets the server name that the sidecars of
// locks on the default contact points verify, and a value that is not a DNS name is refused with
// the flag named.
func TestTLSServerNameFlag(t *testing.T) {
	env := func(string) string { return "baton-system" }
	base := []string{"--sidecar-image=baton:test", "--cassandra-hosts=cass-0.db"}
	o, err := operator.ParseOptions(append(base, "--cassandra-tls-server-name=cassandra.db.svc"), env)
	if err != nil {
		t.Fatal(err)
	}
	if o.Inject.Cassandra.TLSServerName != "cassandra.db.svc" {
		t.Errorf("Inject.Cassandra.TLSServerName = %q, want cassandra.db.svc", o.Inject.Cassandra.TLSServerName)
	}
	for _, bad := range []string{"cassandra.db.svc:9042", "-db", "a b"} {
		_, err := operator.ParseOptions(append(base, "--cassandra-tls-server-name="+bad), env)
		if err == nil || !strings.Contains(err.Error(), "--cassandra-tls-server-name") {
			t.Errorf("%q: error %v, want one naming --cassandra-tls-server-name", bad, err)
		}
	}
}
