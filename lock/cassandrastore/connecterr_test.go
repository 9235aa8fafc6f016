package cassandrastore_test

import (
	"errors"
	"testing"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestClassifyConnectError pins which failures of a new session are permanent, on the messages
// the driver flattens them into (the wording of Cassandra 5.0 and Go's crypto/tls; the real
// thing is exercised by test/e2e's TestAuthAndTLSCassandra).
func TestClassifyConnectError(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want error // nil: left alone, retried
	}{
		{"gocql: unable to create session: unable to connect to initial hosts: Provided username tenant and/or password are incorrect", cassandrastore.ErrAuthentication},
		{`gocql: unable to create session: unable to connect to initial hosts: authentication required (using "org.apache.cassandra.auth.PasswordAuthenticator")`, cassandrastore.ErrAuthentication},
		{"gocql: unable to create session: unable to connect to initial hosts: tenant is not permitted to log in", cassandrastore.ErrAuthentication},
		{"gocql: unable to create session: unable to connect to initial hosts: remote error: tls: certificate required", cassandrastore.ErrAuthentication},
		// The alerts a server sends when it refuses the client's certificate; Java's TLS stack
		// (Cassandra's) sends certificate_unknown for any failure of it.
		{"gocql: unable to create session: unable to connect to initial hosts: remote error: tls: unknown certificate", cassandrastore.ErrAuthentication},
		{"gocql: unable to create session: unable to connect to initial hosts: remote error: tls: expired certificate", cassandrastore.ErrAuthentication},
		{"gocql: unable to create session: unable to connect to initial hosts: remote error: tls: revoked certificate", cassandrastore.ErrAuthentication},
		{"gocql: unable to create session: unable to connect to initial hosts: remote error: tls: unsupported certificate", cassandrastore.ErrAuthentication},
		{"gocql: unable to create session: unable to connect to initial hosts: remote error: tls: bad certificate", cassandrastore.ErrAuthentication},
		{"gocql: unable to create session: unable to connect to initial hosts: remote error: tls: unknown certificate authority", cassandrastore.ErrAuthentication},
		// Not about certificates (e.g. no common cipher suite or protocol version): left alone.
		{"gocql: unable to create session: unable to connect to initial hosts: remote error: tls: handshake failure", nil},
		{"gocql: unable to create session: unable to connect to initial hosts: tls: failed to verify certificate: x509: certificate signed by unknown authority", cassandrastore.ErrServerNotTrusted},
		{"gocql: unable to create session: unable to connect to initial hosts: tls: failed to verify certificate: x509: certificate is valid for cassandra.db.svc, not other.db", cassandrastore.ErrServerNotTrusted},
		{"gocql: unable to create session: unable to connect to initial hosts: dial tcp 10.0.0.7:9042: connect: connection refused", nil},
		{"gocql: unable to create session: unable to connect to initial hosts: EOF", nil},
	} {
		err := cassandrastore.ClassifyConnectError(errors.New(tc.msg))
		switch {
		case tc.want == nil && cassandrastore.IsPermanentConnectError(err):
			t.Errorf("%q classified as permanent: %v", tc.msg, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%q: got %v, want it to wrap %v", tc.msg, err, tc.want)
		}
	}
	if cassandrastore.ClassifyConnectError(nil) != nil {
		t.Error("nil classified as an error")
	}
}
