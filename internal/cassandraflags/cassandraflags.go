package cassandraflags

import (
	"errors"
	"io/fs"
	"os"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// maxClusterName bounds --cassandra-cluster-name, as the API bounds status.cassandraClusterName.
const maxClusterName = 256

// Read returns the Connection that the Cassandra settings in v describe: contact points split,
// consistency levels checked and parsed, the credential files read and the TLS files read and
// checked (a client certificate whose certificate and key files both do not exist is left out:
// the webhook names them in a TLS Secret that may hold only a CA). It returns every problem at
// once, each a *sidecarcontract.SettingError that names the flag, its variable and what to do.
func Read(v *sidecarcontract.Values) (cassandrastore.Connection, []error) {
	var errs []error
	bad := func(s sidecarcontract.Setting, format string, args ...any) {
		errs = append(errs, sidecarcontract.Errorf(s, format, args...))
	}
	conn := cassandrastore.Connection{
		ContactPoints: sidecarcontract.SplitList(v.Get(sidecarcontract.CassandraHosts)),
		Keyspace:      v.Get(sidecarcontract.Keyspace),
		LocalDC:       v.Get(sidecarcontract.LocalDC),
		ClusterName:   v.Get(sidecarcontract.ClusterName),
	}
	if len(conn.ContactPoints) == 0 {
		bad(sidecarcontract.CassandraHosts, "is empty: give at least one Cassandra contact point, e.g. cassandra.db:9042")
	}
	cons := batonv1.Consistency(strings.ToUpper(v.Get(sidecarcontract.Consistency)))
	serial := batonv1.SerialConsistency(strings.ToUpper(v.Get(sidecarcontract.SerialConsistency)))
	var err error
	if !sidecarcontract.ValidConsistency(cons) {
		bad(sidecarcontract.Consistency, "is %q: a lock needs %s", cons, sidecarcontract.ConsistencyChoices())
	} else if conn.Consistency, err = gocql.ParseConsistencyWrapper(string(cons)); err != nil {
		bad(sidecarcontract.Consistency, "is %q, which the Cassandra driver does not know: %v", cons, err)
	}
	if !sidecarcontract.ValidSerialConsistency(serial) {
		bad(sidecarcontract.SerialConsistency, "is %q: use %s", serial, sidecarcontract.SerialConsistencyChoices())
	} else if conn.SerialConsistency, err = gocql.ParseConsistencyWrapper(string(serial)); err != nil {
		bad(sidecarcontract.SerialConsistency, "is %q, which the Cassandra driver does not know: %v", serial, err)
	}
	if sidecarcontract.NeedsLocalDC(cons, serial) && conn.LocalDC == "" {
		bad(sidecarcontract.LocalDC, "is empty but %s/%s are data-centre local: name the local data centre", cons, serial)
	}
	if len(conn.ClusterName) > maxClusterName || strings.ContainsAny(conn.ClusterName, "\n\r\x00") {
		bad(sidecarcontract.ClusterName, "is %q: give the cluster_name of the Cassandra cluster (one line, at most %d characters), or leave it empty",
			conn.ClusterName, maxClusterName)
	}

	user, pass := v.Get(sidecarcontract.UsernameFile), v.Get(sidecarcontract.PasswordFile)
	if (user == "") != (pass == "") {
		bad(sidecarcontract.PasswordFile, "and %s must be given together", sidecarcontract.UsernameFile)
	} else if user != "" {
		if conn.Username, err = readSecret(sidecarcontract.UsernameFile, user); err != nil {
			errs = append(errs, err)
		}
		if conn.Password, err = readSecret(sidecarcontract.PasswordFile, pass); err != nil {
			errs = append(errs, err)
		}
	}

	ca, cert, key := v.Get(sidecarcontract.TLSCA), v.Get(sidecarcontract.TLSCert), v.Get(sidecarcontract.TLSKey)
	switch {
	case (cert == "") != (key == ""):
		bad(sidecarcontract.TLSKey, "and %s must be given together for mutual TLS", sidecarcontract.TLSCert)
	case ca != "" || cert != "":
		tls, err := readTLS(v, ca, cert, key)
		if err != nil {
			errs = append(errs, err)
		}
		conn.TLS = tls
	}
	return conn, errs
}

// readSecret reads a one-line secret from the file named by setting s.
func readSecret(s sidecarcontract.Setting, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", sidecarcontract.Errorf(s, "cannot be read: %v", err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", sidecarcontract.Errorf(s, "names %s, which is empty", path)
	}
	return v, nil
}

// readTLS reads and checks the TLS files; its error names the setting at fault.
func readTLS(v *sidecarcontract.Values, ca, cert, key string) (*cassandrastore.TLS, error) {
	tls, err := cassandrastore.LoadTLS(ca, cert, key, v.Get(sidecarcontract.TLSServerName))
	if err == nil {
		_, err = tls.Config()
	}
	var pe *fs.PathError
	switch {
	case err == nil:
		return tls, nil
	case errors.As(err, &pe):
		for _, s := range []sidecarcontract.Setting{sidecarcontract.TLSCA, sidecarcontract.TLSCert, sidecarcontract.TLSKey} {
			if v.Get(s) == pe.Path {
				return nil, sidecarcontract.Errorf(s, "cannot be read: %v", pe)
			}
		}
		return nil, sidecarcontract.Errorf(sidecarcontract.TLSCA, "cannot be read: %v", err)
	case errors.Is(err, cassandrastore.ErrTLSCA):
		return nil, sidecarcontract.Errorf(sidecarcontract.TLSCA, "names %s, which holds no PEM certificate: give the PEM CA bundle that signs Cassandra's certificates", ca)
	default:
		return nil, sidecarcontract.Errorf(sidecarcontract.TLSCert, "and %s do not hold a PEM client certificate and its key: %v", sidecarcontract.TLSKey, err)
	}
}
