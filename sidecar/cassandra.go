package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

// ClusterConfig returns the gocql configuration for these options: consistencies, data-centre
// aware routing, credentials read from their files and TLS. The sidecar's requests carry their
// own deadlines; the driver's timeout only bounds a request that lost its way.
func (c CassandraOptions) ClusterConfig() (*gocql.ClusterConfig, error) {
	cons, err := gocql.ParseConsistencyWrapper(c.Consistency)
	if err != nil {
		return nil, fmt.Errorf("sidecar: %s: %w", name("consistency"), err)
	}
	serial, err := gocql.ParseConsistencyWrapper(c.SerialConsistency)
	if err != nil {
		return nil, fmt.Errorf("sidecar: %s: %w", name("serial"), err)
	}
	conn := cassandrastore.Connection{
		ContactPoints: c.ContactPoints, LocalDC: c.LocalDC,
		Consistency: cons, SerialConsistency: serial,
	}
	if c.UsernameFile != "" {
		if conn.Username, err = readSecret("username-file", c.UsernameFile); err != nil {
			return nil, err
		}
		if conn.Password, err = readSecret("password-file", c.PasswordFile); err != nil {
			return nil, err
		}
	}
	if c.TLSCAFile != "" || c.TLSCertFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
		if c.TLSCAFile != "" {
			pem, err := os.ReadFile(c.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("sidecar: %s: %w", name("tls-ca"), err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("sidecar: %s: %s holds no PEM certificate", name("tls-ca"), c.TLSCAFile)
			}
		}
		if c.TLSCertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
			if err != nil {
				return nil, fmt.Errorf("sidecar: %s/%s: %w", name("tls-cert"), name("tls-key"), err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		conn.TLS = tc
	}
	return conn.ClusterConfig(), nil
}

func readSecret(key, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("sidecar: %s: %w", name(key), err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("sidecar: %s: %s is empty", name(key), path)
	}
	return v, nil
}
