package cassandraflags

import (
	"errors"
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/testpki"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// read parses args and env as a program with the Cassandra settings would.
func read(t *testing.T, args []string, env map[string]string) (cassandrastore.Connection, []error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := sidecarcontract.Register(fs, func(k string) string { return env[k] }, sidecarcontract.CassandraSettings()...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return Read(v)
}

func TestReadDefaults(t *testing.T) {
	conn, errs := read(t, nil, map[string]string{"BATON_CASSANDRA_HOSTS": "db-0:9042, db-1"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !slices.Equal(conn.ContactPoints, []string{"db-0:9042", "db-1"}) || conn.Keyspace != "baton" || conn.LocalDC != "" ||
		conn.Consistency != gocql.Quorum || conn.SerialConsistency != gocql.Serial || conn.ClusterName != "" ||
		conn.Username != "" || conn.TLS != nil {
		t.Errorf("defaults: %#v", conn)
	}
}

func TestReadEverything(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t)
	client := ca.Issue(t, "baton")
	args := []string{
		"--cassandra-hosts", "db:9142", "--keyspace", "locks", "--local-dc", "eu", "--consistency", "local_quorum",
		"--serial-consistency", "LOCAL_SERIAL", "--cassandra-cluster-name", "prod",
		"--cassandra-username-file", testpki.WriteFile(t, dir, "user", []byte("baton\n")),
		"--cassandra-password-file", testpki.WriteFile(t, dir, "pass", []byte("s3cret\r\n")),
		"--cassandra-tls-ca", testpki.WriteFile(t, dir, "ca.crt", ca.PEM),
		"--cassandra-tls-cert", testpki.WriteFile(t, dir, "tls.crt", client.Cert),
		"--cassandra-tls-key", testpki.WriteFile(t, dir, "tls.key", client.Key),
		"--cassandra-tls-server-name", "cassandra.db",
	}
	conn, errs := read(t, args, map[string]string{"BATON_CASSANDRA_HOSTS": "ignored", "BATON_CASSANDRA_LOCAL_DC": "ignored"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !slices.Equal(conn.ContactPoints, []string{"db:9142"}) || conn.Keyspace != "locks" || conn.LocalDC != "eu" ||
		conn.Consistency != gocql.LocalQuorum || conn.SerialConsistency != gocql.LocalSerial || conn.ClusterName != "prod" ||
		conn.Username != "baton" || conn.Password != "s3cret" {
		t.Errorf("connection: %#v", conn)
	}
	if conn.TLS == nil || string(conn.TLS.CA) != string(ca.PEM) || string(conn.TLS.Cert) != string(client.Cert) ||
		conn.TLS.ServerName != "cassandra.db" {
		t.Fatalf("TLS: %+v", conn.TLS)
	}
	cc, err := conn.ClusterConfig()
	if err != nil || cc.SslOpts == nil || len(cc.SslOpts.Config.Certificates) != 1 || cc.SslOpts.Config.ServerName != "cassandra.db" {
		t.Errorf("cluster config: %+v, %v", cc, err)
	}

	// A TLS Secret with only a CA: the injected certificate and key paths do not exist.
	conn, errs = read(t, nil, map[string]string{"BATON_CASSANDRA_HOSTS": "db",
		"BATON_CASSANDRA_TLS_CA": filepath.Join(dir, "ca.crt"), "BATON_CASSANDRA_TLS_CERT": filepath.Join(dir, "none.crt"),
		"BATON_CASSANDRA_TLS_KEY": filepath.Join(dir, "none.key")})
	if len(errs) > 0 || conn.TLS == nil || conn.TLS.Cert != nil || len(conn.TLS.CA) == 0 {
		t.Errorf("CA only: %+v, %v", conn.TLS, errs)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t)
	client := ca.Issue(t, "baton")
	user := testpki.WriteFile(t, dir, "user", []byte("baton"))
	empty := testpki.WriteFile(t, dir, "empty", []byte("\n"))
	notPEM := testpki.WriteFile(t, dir, "garbage", []byte("not a certificate"))
	cert := testpki.WriteFile(t, dir, "tls.crt", client.Cert)
	otherKey := testpki.WriteFile(t, dir, "other.key", ca.Issue(t, "other").Key)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // every substring must appear
	}{
		{"no hosts", map[string]string{"BATON_CASSANDRA_HOSTS": " , "},
			[]string{"--cassandra-hosts (BATON_CASSANDRA_HOSTS) is empty"}},
		{"weak consistency", map[string]string{"BATON_CASSANDRA_CONSISTENCY": "one"},
			[]string{`--cassandra-consistency (BATON_CASSANDRA_CONSISTENCY) is "ONE": a lock needs QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL`}},
		{"ANY is not the default", map[string]string{"BATON_CASSANDRA_CONSISTENCY": "any"}, []string{`is "ANY": a lock needs QUORUM`}},
		{"bad serial", map[string]string{"BATON_CASSANDRA_SERIAL_CONSISTENCY": "quorum"},
			[]string{`--cassandra-serial-consistency (BATON_CASSANDRA_SERIAL_CONSISTENCY) is "QUORUM": use SERIAL or LOCAL_SERIAL`}},
		{"local without dc", map[string]string{"BATON_CASSANDRA_SERIAL_CONSISTENCY": "LOCAL_SERIAL"},
			[]string{"--cassandra-local-dc (BATON_CASSANDRA_LOCAL_DC) is empty", "name the local data centre"}},
		{"multi-line cluster name", map[string]string{"BATON_CASSANDRA_CLUSTER_NAME": "a\nb"},
			[]string{"--cassandra-cluster-name (BATON_CASSANDRA_CLUSTER_NAME)", "one line"}},
		{"long cluster name", map[string]string{"BATON_CASSANDRA_CLUSTER_NAME": strings.Repeat("c", 257)}, []string{"at most 256"}},
		{"user without password", map[string]string{"BATON_CASSANDRA_USERNAME_FILE": user},
			[]string{"--cassandra-password-file (BATON_CASSANDRA_PASSWORD_FILE) and --cassandra-username-file (BATON_CASSANDRA_USERNAME_FILE) must be given together"}},
		{"missing password file", map[string]string{"BATON_CASSANDRA_USERNAME_FILE": user, "BATON_CASSANDRA_PASSWORD_FILE": filepath.Join(dir, "nope")},
			[]string{"--cassandra-password-file (BATON_CASSANDRA_PASSWORD_FILE) cannot be read", "nope"}},
		{"empty password", map[string]string{"BATON_CASSANDRA_USERNAME_FILE": user, "BATON_CASSANDRA_PASSWORD_FILE": empty},
			[]string{"--cassandra-password-file (BATON_CASSANDRA_PASSWORD_FILE) names " + empty + ", which is empty"}},
		{"cert without key", map[string]string{"BATON_CASSANDRA_TLS_CERT": cert},
			[]string{"--cassandra-tls-key (BATON_CASSANDRA_TLS_KEY) and --cassandra-tls-cert (BATON_CASSANDRA_TLS_CERT) must be given together for mutual TLS"}},
		{"missing CA", map[string]string{"BATON_CASSANDRA_TLS_CA": filepath.Join(dir, "none.crt")},
			[]string{"--cassandra-tls-ca (BATON_CASSANDRA_TLS_CA) cannot be read", "none.crt"}},
		{"missing key", map[string]string{"BATON_CASSANDRA_TLS_CERT": cert, "BATON_CASSANDRA_TLS_KEY": filepath.Join(dir, "none.key")},
			[]string{"--cassandra-tls-key (BATON_CASSANDRA_TLS_KEY) cannot be read"}},
		{"CA not PEM", map[string]string{"BATON_CASSANDRA_TLS_CA": notPEM},
			[]string{"--cassandra-tls-ca (BATON_CASSANDRA_TLS_CA) names " + notPEM + ", which holds no PEM certificate"}},
		{"empty CA", map[string]string{"BATON_CASSANDRA_TLS_CA": empty},
			[]string{"--cassandra-tls-ca (BATON_CASSANDRA_TLS_CA) names " + empty + ", which holds no PEM certificate"}},
		{"key of another certificate", map[string]string{"BATON_CASSANDRA_TLS_CERT": cert, "BATON_CASSANDRA_TLS_KEY": otherKey},
			[]string{"--cassandra-tls-cert (BATON_CASSANDRA_TLS_CERT) and --cassandra-tls-key (BATON_CASSANDRA_TLS_KEY) do not hold a PEM client certificate and its key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"BATON_CASSANDRA_HOSTS": "db"}
			for k, v := range tc.env {
				env[k] = v
			}
			_, errs := read(t, nil, env)
			if len(errs) == 0 {
				t.Fatal("accepted")
			}
			var se *sidecarcontract.SettingError
			if !errors.As(errs[0], &se) {
				t.Errorf("error %v is not a *SettingError", errs[0])
			}
			msg := errors.Join(errs...).Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("errors %q do not mention %q", msg, w)
				}
			}
		})
	}
	// Every problem at once.
	_, errs := read(t, nil, map[string]string{"BATON_CASSANDRA_CONSISTENCY": "one", "BATON_CASSANDRA_SERIAL_CONSISTENCY": "two",
		"BATON_CASSANDRA_TLS_CA": notPEM})
	if len(errs) != 4 {
		t.Errorf("want 4 problems (hosts, consistency, serial consistency, CA), got %q", errs)
	}
}
