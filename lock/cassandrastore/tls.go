package cassandrastore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Errors of TLS material; the message says which part is wrong and why.
var (
	// ErrTLS wraps every problem with the TLS material of a Connection.
	ErrTLS = errors.New("cassandrastore: bad TLS material")
	// ErrTLSCA wraps (together with ErrTLS) a CA bundle without a PEM certificate.
	ErrTLSCA = fmt.Errorf("%w: the CA bundle holds no PEM certificate", ErrTLS)
	// ErrTLSClientCert wraps (together with ErrTLS) a client certificate and key that do not
	// form a pair, or either without the other.
	ErrTLSClientCert = fmt.Errorf("%w: client certificate and key", ErrTLS)
)

// TLS is the TLS material of a Connection, PEM-encoded as in a kubernetes.io/tls Secret or on
// disk. Any combination of a CA and a client certificate works: a CA alone (the servers are
// verified against it), a client certificate alone (mutual TLS, the servers verified against the
// system's roots), or both.
type TLS struct {
	// CA is the bundle that verifies the servers' certificates; empty: the system's roots.
	CA []byte
	// Cert and Key are the client certificate and its key for mutual TLS; both or neither.
	Cert, Key []byte
	// ServerName is the name to verify in the servers' certificates; empty: each node's IP address
	// (the driver resolves contact points to IPs and dials those), which the certificates then need
	// as IP SANs (TestEmptyServerNameVerifiesNodeIP).
	ServerName string
}

// LoadTLS reads TLS material from PEM files: caFile, and certFile with keyFile for mutual TLS.
// Empty names are left out. A certificate and key that both do not exist are left out too (a TLS
// Secret mounted with only a CA); one without the other is an error (ErrTLSClientCert), and so is
// an empty CA file (ErrTLSCA). Errors name the file; a missing file is an *fs.PathError. The PEM
// content is checked only by Config.
func LoadTLS(caFile, certFile, keyFile, serverName string) (*TLS, error) {
	if certFile != "" && keyFile != "" && absent(certFile) && absent(keyFile) {
		certFile, keyFile = "", ""
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: give both or neither (certificate %q, key %q)", ErrTLSClientCert, certFile, keyFile)
	}
	t := &TLS{ServerName: serverName}
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{caFile, &t.CA}, {certFile, &t.Cert}, {keyFile, &t.Key}} {
		if f.name == "" {
			continue
		}
		b, err := os.ReadFile(f.name)
		if err != nil {
			return nil, fmt.Errorf("cassandrastore: reading TLS material: %w", err)
		}
		*f.dst = b
	}
	if caFile != "" && len(t.CA) == 0 {
		return nil, fmt.Errorf("%w (%s is empty)", ErrTLSCA, caFile)
	}
	return t, nil
}

// absent reports whether name certainly does not exist.
func absent(name string) bool {
	_, err := os.Stat(name)
	return errors.Is(err, os.ErrNotExist)
}

// Config returns the crypto/tls configuration of t: at least TLS 1.2, t's CA as the only roots
// when given, t's client certificate when given, and t's server name. Errors wrap ErrTLSCA or
// ErrTLSClientCert.
func (t *TLS) Config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if len(t.CA) > 0 {
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(t.CA) {
			return nil, ErrTLSCA
		}
	}
	if len(t.Cert) > 0 || len(t.Key) > 0 {
		cert, err := tls.X509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTLSClientCert, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
