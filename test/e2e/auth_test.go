package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/cli"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/internal/testing/testpki"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// authServerName is the only name in the auth Cassandra's certificate: a sidecar that dials its
// address without verifying this name (spec.cassandra.tlsServerName) refuses the server.
const authServerName = "cassandra.baton-e2e.test"

// authKeyspace is the tenant's keyspace on the auth Cassandra, made as a DBA would (docs/cassandra.md).
const authKeyspace = "baton_tenant"

// authCassandra is a second, small Cassandra for TestAuthAndTLSCassandra, production-like:
// PasswordAuthenticator with CassandraAuthorizer, and client connections only over mutual TLS
// (client_encryption_options: optional false, require_client_auth true) with certificates from a
// CA of its own, which signs the server's certificate and every client certificate it accepts. It
// listens on the node's address on the pod bridge and starts on first use; TestMain stops it.
var authCassandra = &authDB{}

type authDB struct {
	once sync.Once
	err  error
	ca   *testpki.CA
	// admin is the client certificate of the superuser's sessions and of the readiness probes.
	admin testpki.Pair
	dir   string
	db    *testenv.Cassandra
}

// config is the auth Cassandra's row of testenv's table, on the pod bridge.
func (a *authDB) config() localcassandra.Config {
	c := testenv.CassandraConfig("e2e-auth")
	c.IPs = []string{localnode.HostIP}
	return c
}

// host is its contact point, host:port, as pods reach it.
func (a *authDB) host() string {
	c := a.config()
	return net.JoinHostPort(c.IPs[0], strconv.Itoa(c.NativePort))
}

// cluster starts it (once per test binary) and returns it with its CA.
func (a *authDB) cluster(t *testing.T) (*localcassandra.Cluster, *testpki.CA) {
	t.Helper()
	a.once.Do(func() { a.err = a.prepare() })
	if a.err != nil {
		t.Fatal(a.err)
	}
	return a.db.Cluster(t), a.ca
}

// prestart starts it in the background when the run includes TestAuthAndTLSCassandra, so that
// its JVM starts during the cluster's set-up rather than on that test's clock, at the end of the
// run. A failure shows in cluster.
func (a *authDB) prestart() {
	if !runIncludes("TestAuthAndTLSCassandra") {
		return
	}
	a.once.Do(func() { a.err = a.prepare() })
	if a.err == nil {
		a.db.Prestart()
	}
}

// clientCert signs a client certificate for name with ca.
func clientCert(ca *testpki.CA, name string) (testpki.Pair, error) {
	return ca.Sign(testpki.Request{Subject: pkix.Name{CommonName: name}, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// adminTLS is the TLS configuration of the superuser's sessions: the CA, the server name and the
// admin client certificate.
func (a *authDB) adminTLS() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(a.admin.Cert, a.admin.Key)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.ca.PEM)
	return &tls.Config{RootCAs: roots, ServerName: authServerName, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// prepare makes the CA, the server's PEM keystore (Cassandra's PEMBasedSslContextFactory takes a
// PKCS#8 key and the certificate in one file), its PEM truststore (the CA, which client
// certificates must chain to), the admin client certificate and the configuration.
func (a *authDB) prepare() error {
	ca, err := testpki.New("baton e2e Cassandra CA")
	if err != nil {
		return err
	}
	pair, err := ca.Sign(testpki.Request{Subject: pkix.Name{CommonName: authServerName}, DNSNames: []string{authServerName},
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return err
	}
	block, _ := pem.Decode(pair.Key)
	if block == nil {
		return fmt.Errorf("the server key is not PEM")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if a.admin, err = clientCert(ca, "cassandra"); err != nil {
		return err
	}
	if a.dir, err = os.MkdirTemp("", "baton-e2e-auth-"); err != nil {
		return err
	}
	keystore, truststore := filepath.Join(a.dir, "server.pem"), filepath.Join(a.dir, "ca.pem")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(keystore, append(pemKey, pair.Cert...), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(truststore, ca.PEM, 0o600); err != nil {
		return err
	}
	cfg := a.config()
	cfg.Authenticator = localcassandra.PasswordAuthenticator
	cfg.ExtraYAML = fmt.Sprintf(`client_encryption_options:
  enabled: true
  optional: false
  require_client_auth: true
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: %s
  truststore: %s`, keystore, truststore)
	a.ca = ca
	if cfg.ClientTLS, err = a.adminTLS(); err != nil {
		return err
	}
	a.db = testenv.NewCassandra(cfg)
	return nil
}

func (a *authDB) stop() {
	if a.db != nil {
		a.db.Stop()
	}
	if a.dir != "" {
		_ = os.RemoveAll(a.dir)
	}
}

// tenantSchema returns the CQL a DBA applies for the tenant's keyspace and role, as baton schema
// prints it (cli.Main, which cmd/baton runs, in this process; the auth Cassandra's one data
// centre, SimpleSnitch's datacenter1, with one replica).
func tenantSchema(ctx context.Context, role string) (string, error) {
	var stdout, stderr strings.Builder
	args := []string{"schema", "--keyspace", authKeyspace, "--replication", "datacenter1:1", "--allow-single-replica", "--role", role}
	if code := cli.Main(ctx, nil, args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr); code != 0 {
		return "", fmt.Errorf("baton %s: exit code %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String(), nil
}

// setUpTenant applies, as the superuser over mutual TLS, what a DBA applies for a tenant: script,
// the output of baton schema (the tenant's keyspace, baton's tables, its role and grants), statement
// by statement, then the role's password, as that output says to.
func setUpTenant(t *testing.T, ctx context.Context, cl *localcassandra.Cluster, script, role, password string) {
	t.Helper()
	adminTLS, err := authCassandra.adminTLS()
	if err != nil {
		t.Fatal(err)
	}
	s, err := testenv.NewSession(cl.Hosts(), func(cc *gocql.ClusterConfig) {
		cc.Authenticator = gocql.PasswordAuthenticator{Username: "cassandra", Password: "cassandra"}
		cc.SslOpts = &gocql.SslOptions{Config: adminTLS, EnableHostVerification: true}
		cc.Consistency = gocql.One // the superuser's role reads are at QUORUM of one node anyway
		// A DBA's session: schema changes and role creation (a bcrypt hash) on a node that has just
		// started, beside a real node's worth of processes on two cores, took more than the 2 s
		// default (CI: "creating schema in keyspace baton_tenant: no response received within
		// timeout period"). Cassandra's own DDL timeout is what bounds them.
		cc.Timeout = 30 * time.Second
	})
	if err != nil {
		t.Fatalf("the superuser over TLS: %v", err)
	}
	defer s.Close()
	for _, q := range append(cqlStatements(script), fmt.Sprintf("ALTER ROLE %s WITH PASSWORD = '%s'", role, password)) {
		if err := s.Query(q).ExecContext(ctx); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// cqlStatements splits a CQL script as baton schema prints it into its statements: comment lines
// start with "--", and a statement ends with ";" at the end of a line.
func cqlStatements(script string) []string {
	var stmts, cur []string
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") || trimmed == "" && len(cur) == 0 {
			continue
		}
		cur = append(cur, line)
		if strings.HasSuffix(trimmed, ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.TrimSpace(strings.Join(cur, "\n")), ";"))
			cur = nil
		}
	}
	return stmts
}

// The tenant's role on the auth Cassandra, as setUpTenant makes it.
const (
	tenantRole     = "tenant_e2e"
	tenantPassword = "tenant-e2e-s3cret"
)

// tenantSecret is what a tenant's Secret for the auth Cassandra holds: its role's login, the CA
// that verifies the server (ca.crt) and, for mutual TLS, a client certificate (tls.crt, tls.key).
type tenantSecret struct {
	password string
	ca       []byte
	client   *testpki.Pair // nil: none
}

// TestAuthAndTLSCassandra (issue 25, item 1, on the real node): DistributedLocks on a Cassandra
// that requires a password login and mutual TLS of every client, with the tenant's keyspace, role
// and grants made by applying what baton schema prints, as a DBA would. A tenant's Secret, labelled for
// baton, holds its role's login, the CA and a client certificate; the lock names it and the server
// name the server's certificate carries. Its pod's sidecar connects with them, the pod holds the
// lock and turns Ready, and the operator, connecting with the lock's own Secret, reports
// StoreReachable. Three locks whose Secret is wrong in one way each (the password, no client
// certificate, the CA of another authority): each sidecar stops at once saying what to fix (the
// kubelet restarts it), and StoreReachable is False with reason AuthenticationFailed or
// ServerNotTrusted. Before the pods, the same failures and a client certificate of another CA are
// classified on sessions from the test process (cassandrastore.CreateSession, as the sidecar and
// the operator open them) to the same Cassandra.
func TestAuthAndTLSCassandra(t *testing.T) {
	t.Parallel() // mostly waits (on a second Cassandra, the kubelet): runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	script, err := tenantSchema(ctx, tenantRole)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cl, ca := authCassandra.cluster(t)
	t.Logf("auth+mTLS Cassandra up after %s", time.Since(start).Round(100*time.Millisecond))
	setUpTenant(t, ctx, cl, script, tenantRole, tenantPassword)
	tenantCert, err := clientCert(ca, tenantRole)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := testpki.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	strangerCert, err := clientCert(otherCA, tenantRole)
	if err != nil {
		t.Fatal(err)
	}
	good := tenantSecret{password: tenantPassword, ca: ca.PEM, client: &tenantCert}
	failures := []struct {
		name   string
		secret tenantSecret
		want   error  // what cassandrastore.CreateSession's error wraps
		reason string // StoreReachable's reason
		says   string // in the sidecar's last words and the condition
	}{
		{"WrongPassword", tenantSecret{password: "not-the-password", ca: ca.PEM, client: &tenantCert},
			cassandrastore.ErrAuthentication, controllers.ReasonAuthenticationFailed, "refused the sidecar's user name or password"},
		{"NoClientCertificate", tenantSecret{password: tenantPassword, ca: ca.PEM},
			cassandrastore.ErrAuthentication, controllers.ReasonAuthenticationFailed, "refused the TLS client certificate, or requires one"},
		{"ClientCertificateOfAnotherCA", tenantSecret{password: tenantPassword, ca: ca.PEM, client: &strangerCert},
			cassandrastore.ErrAuthentication, controllers.ReasonAuthenticationFailed, "refused the TLS client certificate, or requires one"},
		{"WrongCA", tenantSecret{password: tenantPassword, ca: otherCA.PEM, client: &tenantCert},
			cassandrastore.ErrServerNotTrusted, controllers.ReasonServerNotTrusted, "TLS certificate is not trusted"},
	}

	// From the test process: the real Cassandra's answers, as the driver reports them, classified.
	if err := tenantSession(cl, good); err != nil {
		t.Fatalf("the tenant's session with its login and client certificate: %v", err)
	}
	for _, f := range failures {
		err := tenantSession(cl, f.secret)
		if !errors.Is(err, f.want) {
			t.Errorf("%s: a session fails with %v; want it to wrap %v", f.name, err, f.want)
			continue
		}
		t.Logf("%s: %v", f.name, err)
	}

	// On the node: the lock with the good Secret, and one per failure but the client certificate
	// of another CA, which the pods do not add to (the sidecar and the operator classify the same
	// error as the session above). All are created first, so that their pods start together; the
	// checks below then mostly find what they wait for done, and hold one of -parallel's slots.
	goodNS := deployAuthLock(t, ctx, c, good)
	failed := map[string]string{} // failure → namespace
	for _, f := range failures {
		if f.name != "ClientCertificateOfAnotherCA" {
			failed[f.name] = deployAuthLock(t, ctx, c, f.secret)
		}
	}
	t.Run("Holds", func(t *testing.T) {
		holder, token := waitForOneReady(t, ctx, c, goodNS, 1)
		t.Logf("holder %s with token %d over mutual TLS with the tenant's login", holder.Name, token)
		reachable := waitForStoreCondition(t, ctx, c, goodNS, metav1.ConditionTrue, "")
		t.Logf("StoreReachable: %s", reachable.Message)
	})
	for _, f := range failures {
		ns, ok := failed[f.name]
		if !ok {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			logs := sidecarLastWords(t, ctx, c, ns)
			if !strings.Contains(logs, "refusing to start") || !strings.Contains(logs, f.says) {
				t.Errorf("the sidecar's last words do not say %q:\n%s", f.says, logs)
			}
			if strings.Contains(logs, f.secret.password) {
				t.Errorf("the sidecar's log shows the password:\n%s", logs)
			}
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, "refusing to start") {
					t.Logf("the sidecar's last words: %s", line)
				}
			}
			cond := waitForStoreCondition(t, ctx, c, ns, metav1.ConditionFalse, f.reason)
			if strings.Contains(cond.Message, f.secret.password) || strings.Contains(cond.Message, tenantRole) {
				t.Errorf("StoreReachable shows the login: %s", cond.Message)
			}
			t.Logf("StoreReachable %s: %s", cond.Reason, cond.Message)
		})
	}
}

// tenantSession opens a session to the auth Cassandra as a sidecar with secret would, and closes it.
func tenantSession(cl *localcassandra.Cluster, secret tenantSecret) error {
	conn := cassandrastore.Connection{ContactPoints: cl.Hosts(), Keyspace: authKeyspace, Credentials: cassandrastore.Credentials{
		Username: tenantRole, Password: secret.password, TLS: &cassandrastore.TLS{CA: secret.ca, ServerName: authServerName}}}
	if secret.client != nil {
		conn.TLS.Cert, conn.TLS.Key = secret.client.Cert, secret.client.Key
	}
	cc, err := conn.ClusterConfig()
	if err != nil {
		return err
	}
	s, err := cassandrastore.CreateSession(cc)
	if err != nil {
		return err
	}
	s.Close()
	return nil
}

// deployAuthLock creates, in a new namespace, the tenant's Secret with secret, labelled for baton,
// and a DistributedLock demo on the auth Cassandra that names it for its login and its TLS, with
// the server name of the server's certificate, and its Deployment of one pod (Blocking,
// ReadinessGate). It returns the namespace.
func deployAuthLock(t *testing.T, ctx context.Context, c cluster, secret tenantSecret) string {
	t.Helper()
	ns := testenv.Namespace(t, c.client, "auth-")
	data := map[string]string{"username": tenantRole, "password": secret.password, "ca.crt": string(secret.ca)}
	if secret.client != nil {
		data["tls.crt"], data["tls.key"] = string(secret.client.Cert), string(secret.client.Key)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cassandra-lock-role",
		Labels: map[string]string{batonv1.LabelCassandraSecret: "true"}}, StringData: data}
	if err := c.client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	dl, dep, _ := batonnode.Workload{Namespace: ns, Name: "demo", Replicas: 1, Mode: batonv1.ModeBlocking,
		Policy: batonv1.TrafficReadinessGate, Lease: 5 * time.Second}.Objects()
	dl.Spec.Cassandra = &batonv1.CassandraConnection{ContactPoints: []string{authCassandra.host()}, Keyspace: authKeyspace,
		CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: s.Name}, TLSSecretRef: &batonv1.TLSSecretRef{Name: s.Name},
		TLSServerName: authServerName}
	for _, o := range []client.Object{dl, dep} {
		if err := c.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

// sidecarLastWords waits until the sidecar of the demo pod of ns has stopped and been restarted,
// and returns the log of its stopped run.
func sidecarLastWords(t *testing.T, ctx context.Context, c cluster, ns string) string {
	t.Helper()
	// A sidecar that refuses to start is restarted and refuses again: the kubelet keeps one dead
	// container per container and removes the one before, so --previous may name a container
	// whose log is gone for a moment; kubectl then prints "unable to retrieve container logs" and
	// exits 0. Ask again until a dead sidecar's log says it refused to start.
	var logs []byte
	var said string
	testenv.WaitFor(t, "the stopped sidecar's log", 2*time.Minute, func() bool {
		pods := demoPods(t, ctx, c, ns)
		if len(pods) != 1 || containerStatus(pods[0], inject.ContainerName).RestartCount == 0 {
			return false
		}
		var err error
		logs, err = exec.CommandContext(ctx, c.kubectl, "--kubeconfig", c.node.Kubeconfig, "logs", "-n", ns, pods[0].Name,
			"-c", inject.ContainerName, "--previous").CombinedOutput()
		if err != nil || !bytes.Contains(logs, []byte("refusing to start")) {
			if msg := fmt.Sprintf("%v: %s", err, bytes.TrimSpace(logs)); msg != said {
				t.Logf("kubectl logs --previous (asking again): %s", msg)
				said = msg
			}
			return false
		}
		return true
	})
	return string(logs)
}

// waitForStoreCondition waits until the DistributedLock demo of ns has StoreReachable with status
// (and reason, when given) and returns it.
func waitForStoreCondition(t *testing.T, ctx context.Context, c cluster, ns string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	testenv.WaitFor(t, fmt.Sprintf("StoreReachable %s %s in %s", status, reason, ns), time.Minute, func() bool {
		var dl batonv1.DistributedLock
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &dl); err != nil {
			return false
		}
		cond := meta.FindStatusCondition(dl.Status.Conditions, batonv1.ConditionStoreReachable)
		if cond == nil {
			return false
		}
		got = *cond
		return cond.Status == status && (reason == "" || cond.Reason == reason)
	})
	return got
}
