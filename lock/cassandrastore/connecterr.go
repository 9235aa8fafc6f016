package cassandrastore

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Errors of connecting that no retry mends: the settings or the credentials must change. They
// wrap the driver's error, whose text says more.
var (
	// ErrAuthentication: Cassandra refused the login (a wrong user name or password, a role
	// that may not log in), or asked for one and the connection had none.
	ErrAuthentication = errors.New("cassandrastore: Cassandra refused the login")
	// ErrServerNotTrusted: a server's TLS certificate did not verify against the CA (or the
	// system's roots), or does not name the server name verified.
	ErrServerNotTrusted = errors.New("cassandrastore: the Cassandra server's TLS certificate is not trusted")
)

// CreateSession opens a session of cc like cc.CreateSession, and classifies its failure: an error
// that wraps ErrAuthentication or ErrServerNotTrusted when no retry can succeed, with a message
// that says what to change; otherwise the driver's error as it is (a node not reachable yet, a
// timeout), which a retry may mend.
//
// The driver flattens the cause of a failed session into text, so the classification reads
// Cassandra's and Go's messages (tested against Cassandra 5.0 with PasswordAuthenticator and
// client TLS): a message that changes wording in another release is not classified, and its
// caller then retries as for an unreachable node. A server that requires TLS and a client
// without it is not classified either: the server just closes the connection.
func CreateSession(cc *gocql.ClusterConfig) (*gocql.Session, error) {
	s, err := cc.CreateSession()
	if err != nil {
		return nil, ClassifyConnectError(err)
	}
	return s, nil
}

// ClassifyConnectError returns err wrapped with ErrAuthentication or ErrServerNotTrusted when it
// says that Cassandra refused or required the login, or that a server's certificate did not
// verify; err itself otherwise (nil for nil). See CreateSession for what it cannot tell.
func ClassifyConnectError(err error) error {
	if err == nil || errors.Is(err, ErrAuthentication) || errors.Is(err, ErrServerNotTrusted) {
		return err
	}
	var creds *gocql.RequestErrCredentials
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	msg := err.Error()
	switch {
	case errors.As(err, &creds),
		// Cassandra's PasswordAuthenticator: "Provided username U and/or password are incorrect".
		strings.Contains(msg, "and/or password are incorrect"),
		// A role without LOGIN: "U is not permitted to log in".
		strings.Contains(msg, "is not permitted to log in"):
		return fmt.Errorf("%w: check the user name and password (a DistributedLock's credentialsSecretRef Secret): %w", ErrAuthentication, err)
	case refusedClientCertificate(msg):
		// The server's TLS alert: it requires a client certificate, or refused the one given.
		return fmt.Errorf("%w: the server refused the TLS client certificate, or requires one (tls.crt and tls.key of the tlsSecretRef Secret): %w", ErrAuthentication, err)
	case strings.Contains(msg, "authentication required"):
		// The driver's own message when the server asks for a login and the connection has none.
		return fmt.Errorf("%w: the server requires a login and none was given (a DistributedLock names it in spec.cassandra.credentialsSecretRef): %w", ErrAuthentication, err)
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid),
		strings.Contains(msg, "x509: "), strings.Contains(msg, "tls: failed to verify certificate"):
		return fmt.Errorf("%w: check the CA (ca.crt of the tlsSecretRef Secret) and the server name verified (spec.cassandra.tlsServerName, the operator's --cassandra-tls-server-name): %w", ErrServerNotTrusted, err)
	}
	return err
}

// clientCertificateAlerts are the TLS alerts, as Go prints them, by which a server refuses the
// client's certificate or asks for one. Java's TLS stack (Cassandra's) sends certificate_unknown
// ("unknown certificate") for any failure of a client certificate.
var clientCertificateAlerts = []string{"certificate required", "bad certificate", "unknown certificate",
	"expired certificate", "revoked certificate", "unsupported certificate", "unknown certificate authority"}

// refusedClientCertificate says whether msg carries a server's TLS alert refusing the client's
// certificate ("remote error: tls: ..."). Other alerts (handshake failure: no common cipher suite
// or version, or some servers' refusal of a certificate too) are not classified and so retried.
func refusedClientCertificate(msg string) bool {
	for _, a := range clientCertificateAlerts {
		if strings.Contains(msg, "remote error: tls: "+a) {
			return true
		}
	}
	return false
}

// IsPermanentConnectError reports whether err (from CreateSession) wraps ErrAuthentication or
// ErrServerNotTrusted: retrying the same connection cannot succeed.
func IsPermanentConnectError(err error) bool {
	return errors.Is(err, ErrAuthentication) || errors.Is(err, ErrServerNotTrusted)
}
