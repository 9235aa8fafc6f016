package cassandrastore_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/testing/testpki"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

func TestTLSConfig(t *testing.T) {
	ca := testpki.NewCA(t)
	client := ca.Issue(t, "baton")
	for _, tc := range []struct {
		name      string
		tls       cassandrastore.TLS
		roots     bool
		certs     int
		wantError error
	}{
		{name: "CA only", tls: cassandrastore.TLS{CA: ca.PEM}, roots: true},
		{name: "client certificate only", tls: cassandrastore.TLS{Cert: client.Cert, Key: client.Key}, certs: 1},
		{name: "both", tls: cassandrastore.TLS{CA: ca.PEM, Cert: client.Cert, Key: client.Key, ServerName: "db"}, roots: true, certs: 1},
		{name: "nothing: system roots", tls: cassandrastore.TLS{}},
		{name: "CA not PEM", tls: cassandrastore.TLS{CA: []byte("not pem")}, wantError: cassandrastore.ErrTLSCA},
		{name: "certificate without key", tls: cassandrastore.TLS{CA: ca.PEM, Cert: client.Cert}, wantError: cassandrastore.ErrTLSClientCert},
		{name: "key of another certificate", tls: cassandrastore.TLS{Cert: client.Cert, Key: ca.Issue(t, "other").Key}, wantError: cassandrastore.ErrTLSClientCert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.tls.Config()
			if tc.wantError != nil {
				if !errors.Is(err, tc.wantError) || !errors.Is(err, cassandrastore.ErrTLS) {
					t.Fatalf("error %v, want %v (and ErrTLS)", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (c.RootCAs != nil) != tc.roots || len(c.Certificates) != tc.certs || c.ServerName != tc.tls.ServerName ||
				c.MinVersion != tls.VersionTLS12 || c.InsecureSkipVerify {
				t.Errorf("config: roots %v, %d certificates, server name %q, min version %x, insecure %v",
					c.RootCAs != nil, len(c.Certificates), c.ServerName, c.MinVersion, c.InsecureSkipVerify)
			}
		})
	}
}

// TestTLSHandshake: the configuration verifies the server against the CA under the server name,
// and presents the client certificate to a server that requires one.
func TestTLSHandshake(t *testing.T) {
	ca := testpki.NewCA(t)
	server, client := ca.Issue(t, "cassandra.db.svc"), ca.Issue(t, "baton")
	for _, tc := range []struct {
		name string
		tls  cassandrastore.TLS
		ok   bool
	}{
		{"mutual TLS", cassandrastore.TLS{CA: ca.PEM, Cert: client.Cert, Key: client.Key, ServerName: "cassandra.db.svc"}, true},
		{"wrong server name", cassandrastore.TLS{CA: ca.PEM, Cert: client.Cert, Key: client.Key, ServerName: "other.db.svc"}, false},
		{"no client certificate", cassandrastore.TLS{CA: ca.PEM, ServerName: "cassandra.db.svc"}, false},
		{"another CA", cassandrastore.TLS{CA: testpki.NewCA(t).PEM, Cert: client.Cert, Key: client.Key, ServerName: "cassandra.db.svc"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := handshake(t, ca, server, tc.tls); (err == nil) != tc.ok {
				t.Errorf("handshake: %v, want success %v", err, tc.ok)
			}
		})
	}
}

// handshake runs a TLS handshake of a client configured from material against a server with
// certificate server that requires a client certificate from ca.
func handshake(t *testing.T, ca *testpki.CA, server testpki.Pair, material cassandrastore.TLS) error {
	t.Helper()
	cert, err := tls.X509KeyPair(server.Cert, server.Key)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := (&cassandrastore.TLS{CA: ca.PEM}).Config()
	if err != nil {
		t.Fatal(err)
	}
	cc, err := material.Config()
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: clients.RootCAs, ClientAuth: tls.RequireAndVerifyClientCert})
	done := make(chan error, 1)
	go func() {
		err := srv.Handshake()
		if err == nil {
			// TLS 1.3 checks the client certificate after the client's handshake returns: read
			// once, so that a refusal reaches the client.
			_, err = srv.Write([]byte{1})
		}
		_ = a.Close()
		done <- err
	}()
	cl := tls.Client(b, cc)
	err = cl.Handshake()
	if err == nil {
		_, err = cl.Read(make([]byte, 1))
	}
	_ = b.Close()
	return errors.Join(err, <-done)
}

func TestLoadTLS(t *testing.T) {
	ca := testpki.NewCA(t)
	client := ca.Issue(t, "baton")
	dir := t.TempDir()
	caFile := testpki.WriteFile(t, dir, "ca.crt", ca.PEM)
	certFile := testpki.WriteFile(t, dir, "tls.crt", client.Cert)
	keyFile := testpki.WriteFile(t, dir, "tls.key", client.Key)

	got, err := cassandrastore.LoadTLS(caFile, certFile, keyFile, "db")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.CA) != string(ca.PEM) || string(got.Cert) != string(client.Cert) || string(got.Key) != string(client.Key) || got.ServerName != "db" {
		t.Errorf("LoadTLS = %+v", got)
	}
	// A TLS Secret with only a CA: the certificate and key files named by default do not exist.
	got, err = cassandrastore.LoadTLS(caFile, filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key"), "")
	if err != nil || got.Cert != nil || got.Key != nil || len(got.CA) == 0 {
		t.Errorf("CA only: %+v, %v", got, err)
	}
	if _, err := cassandrastore.LoadTLS(caFile, certFile, filepath.Join(dir, "none.key"), ""); err == nil {
		t.Error("a certificate whose key file is missing was accepted")
	}
	if _, err := cassandrastore.LoadTLS("", certFile, "", ""); !errors.Is(err, cassandrastore.ErrTLSClientCert) {
		t.Errorf("certificate without key: %v, want ErrTLSClientCert", err)
	}
	if _, err := cassandrastore.LoadTLS(testpki.WriteFile(t, dir, "empty.crt", nil), "", "", ""); !errors.Is(err, cassandrastore.ErrTLSCA) {
		t.Errorf("empty CA file: %v, want ErrTLSCA", err)
	}
	var pe *fs.PathError
	missing := filepath.Join(dir, "missing-ca.crt")
	if _, err := cassandrastore.LoadTLS(missing, "", "", ""); !errors.As(err, &pe) || pe.Path != missing {
		t.Errorf("missing CA file: %v, want an *fs.PathError naming it", err)
	}
}

func TestConnectionClusterConfig(t *testing.T) {
	ca := testpki.NewCA(t)
	conn := cassandrastore.Connection{ContactPoints: []string{"db:9042"}}
	cc, err := conn.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cc.Consistency != gocql.Quorum || cc.SerialConsistency != gocql.Serial || cc.Authenticator != nil || cc.SslOpts != nil {
		t.Errorf("plain connection: consistency %v/%v, authenticator %v, TLS %v",
			cc.Consistency, cc.SerialConsistency, cc.Authenticator, cc.SslOpts)
	}
	// Slow coordinators come last (TestTrioHungNodeWhileHolding): the policy also observes answers.
	if observer, ok := cc.QueryObserver.(gocql.HostSelectionPolicy); !ok || observer != cc.PoolConfig.HostSelectionPolicy {
		t.Errorf("plain connection: host policy %T, query observer %T; want one slow-host policy as both",
			cc.PoolConfig.HostSelectionPolicy, cc.QueryObserver)
	}
	// A restarted node is used again within a second (TestTrioHungNodeAfterRestart), not after the
	// driver's 10 s node-up delay or 60 s default.
	if cc.ReconnectInterval != cassandrastore.ReconnectInterval || cassandrastore.ReconnectInterval > time.Second {
		t.Errorf("plain connection: reconnect interval %v, want %v", cc.ReconnectInterval, cassandrastore.ReconnectInterval)
	}

	conn = cassandrastore.Connection{ContactPoints: []string{"db:9042"}, LocalDC: "dc1",
		Consistency: gocql.LocalQuorum, SerialConsistency: gocql.LocalSerial,
		Credentials: cassandrastore.Credentials{Username: "baton", Password: "s3cret",
			TLS: &cassandrastore.TLS{CA: ca.PEM, ServerName: "cassandra.db"}}}
	if cc, err = conn.ClusterConfig(); err != nil {
		t.Fatal(err)
	}
	auth, ok := cc.Authenticator.(gocql.PasswordAuthenticator)
	if !ok || auth.Username != "baton" || auth.Password != "s3cret" {
		t.Errorf("authenticator %#v", cc.Authenticator)
	}
	if cc.Consistency != gocql.LocalQuorum || cc.SerialConsistency != gocql.LocalSerial || cc.PoolConfig.HostSelectionPolicy == nil {
		t.Errorf("consistency %v/%v, policy %v", cc.Consistency, cc.SerialConsistency, cc.PoolConfig.HostSelectionPolicy)
	}
	if cc.SslOpts == nil || cc.SslOpts.Config.ServerName != "cassandra.db" || cc.SslOpts.Config.RootCAs == nil || !cc.SslOpts.EnableHostVerification {
		t.Errorf("TLS options %+v", cc.SslOpts)
	}

	conn.TLS = &cassandrastore.TLS{CA: []byte("not pem")}
	if _, err := conn.ClusterConfig(); !errors.Is(err, cassandrastore.ErrTLSCA) {
		t.Errorf("bad CA: %v, want ErrTLSCA", err)
	}
}

func TestConnectionHidesSecrets(t *testing.T) {
	conn := cassandrastore.Connection{ContactPoints: []string{"db:9042"}, Keyspace: "locks",
		Credentials: cassandrastore.Credentials{Username: "alice", Password: "s3cret", TLS: &cassandrastore.TLS{Key: []byte("private")}}}
	holder := struct{ Cassandra cassandrastore.Connection }{conn}
	for _, s := range []string{conn.String(), fmt.Sprintf("%v", conn), fmt.Sprintf("%+v", holder), fmt.Sprintf("%#v", holder),
		fmt.Sprintf("%+v", conn.Credentials), fmt.Sprintf("%#v", conn.Credentials)} {
		if strings.Contains(s, "s3cret") || strings.Contains(s, "private") || strings.Contains(s, "alice") {
			t.Errorf("%q shows a secret", s)
		}
	}
	if s := conn.String(); s != "Cassandra [db:9042] keyspace locks with a password login over TLS" {
		t.Errorf("String() = %q", s)
	}
	if s := (cassandrastore.Connection{ContactPoints: []string{"db"}}).String(); s != "Cassandra [db] keyspace baton" {
		t.Errorf("String() of a plain connection = %q", s)
	}
}

func TestCredentialsRedact(t *testing.T) {
	c := cassandrastore.Credentials{Username: "alice", Password: "s3cret"}
	base := errors.New("Provided username alice and/or password are incorrect (s3cret)")
	err := c.Redact(fmt.Errorf("connecting: %w", base))
	if got := err.Error(); got != "connecting: Provided username [redacted] and/or password are incorrect ([redacted])" {
		t.Errorf("redacted message %q", got)
	}
	if !errors.Is(err, base) {
		t.Error("errors.Is no longer finds the wrapped error")
	}
	if c.Redact(nil) != nil {
		t.Error("Redact(nil) is not nil")
	}
	plain := errors.New("nothing secret")
	if (cassandrastore.Credentials{}).Redact(plain) != plain || c.Redact(plain) != plain {
		t.Error("an error without secrets is not returned as is")
	}
}

// TestClusterConfigSurvivesAFailedSession: a session that failed to start (Cassandra not reachable
// yet) leaves the configuration usable for the next attempt, as the sidecar's connection retries
// use it; the driver's token-aware policy alone would panic on the second session.
func TestClusterConfigSurvivesAFailedSession(t *testing.T) {
	cc, err := cassandrastore.Connection{ContactPoints: []string{"127.0.0.1:1"}}.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	cc.ConnectTimeout, cc.Timeout = time.Second, time.Second
	for attempt := range 2 {
		if s, err := cc.CreateSession(); err == nil {
			s.Close()
			t.Fatalf("attempt %d: a session to a closed port", attempt)
		}
	}
}
