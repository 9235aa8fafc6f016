package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
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
// PasswordAuthenticator with CassandraAuthorizer, and client connections only over TLS
// (client_encryption_options, optional false) with a certificate from a CA of its own. It listens
// on the node's address on the pod bridge and starts on first use; TestMain stops it.
var authCassandra = &authDB{}

type authDB struct {
	once sync.Once
	err  error
	ca   *testpki.CA
	dir  string
	db   *testenv.Cassandra
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

// prepare makes the CA, the server's PEM keystore (Cassandra's PEMBasedSslContextFactory takes a
// PKCS#8 key and the certificate in one file) and the configuration.
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
	if a.dir, err = os.MkdirTemp("", "baton-e2e-auth-"); err != nil {
		return err
	}
	keystore := filepath.Join(a.dir, "server.pem")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(keystore, append(pemKey, pair.Cert...), 0o600); err != nil {
		return err
	}
	cfg := a.config()
	cfg.Authenticator = localcassandra.PasswordAuthenticator
	cfg.ExtraYAML = fmt.Sprintf(`client_encryption_options:
  enabled: true
  optional: false
  require_client_auth: false
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: %s`, keystore)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	cfg.ClientTLS = &tls.Config{RootCAs: roots, ServerName: authServerName, MinVersion: tls.VersionTLS12}
	a.ca, a.db = ca, testenv.NewCassandra(cfg)
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

// setUpTenant applies, as the superuser over TLS, what a DBA applies for a tenant: its keyspace
// with baton's tables, and a role that may only read and write there.
func setUpTenant(t *testing.T, ctx context.Context, cl *localcassandra.Cluster, ca *testpki.CA, role, password string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	s, err := testenv.NewSession(cl.Hosts(), func(cc *gocql.ClusterConfig) {
		cc.Authenticator = gocql.PasswordAuthenticator{Username: "cassandra", Password: "cassandra"}
		cc.SslOpts = &gocql.SslOptions{Config: &tls.Config{RootCAs: roots, ServerName: authServerName, MinVersion: tls.VersionTLS12}, EnableHostVerification: true}
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
	if err := cassandrastore.EnsureSchema(ctx, s, authKeyspace, "{'class': 'SimpleStrategy', 'replication_factor': 1}"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		fmt.Sprintf("CREATE ROLE IF NOT EXISTS %s WITH LOGIN = true AND PASSWORD = '%s'", role, password),
		fmt.Sprintf("GRANT SELECT ON KEYSPACE %s TO %s", authKeyspace, role),
		fmt.Sprintf("GRANT MODIFY ON KEYSPACE %s TO %s", authKeyspace, role),
	} {
		if err := s.Query(q).ExecContext(ctx); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestAuthAndTLSCassandra (issue 25, item 1, on the real node): a DistributedLock on a Cassandra
// that requires a password login and TLS of every client. The tenant's Secret, labelled for baton,
// holds its role's login and the CA; the lock names it and the server name its certificate
// carries. Its pod's sidecar connects with them, the pod holds the lock and turns Ready, and the
// operator, connecting with the lock's own credentials, reports StoreReachable. A second lock
// whose Secret has a wrong password: its sidecar stops at once saying Cassandra refused the login
// (the kubelet restarts it), and StoreReachable is False with reason AuthenticationFailed.
func TestAuthAndTLSCassandra(t *testing.T) {
	t.Parallel() // mostly waits (on a second Cassandra, the kubelet): runs beside the others of its kind
	c := batonCluster(t)
	start := time.Now()
	cl, ca := authCassandra.cluster(t)
	t.Logf("auth+TLS Cassandra up after %s", time.Since(start).Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	setUpTenant(t, ctx, cl, ca, "tenant_e2e", "tenant-e2e-s3cret")

	deploy := func(password string) string {
		ns := testenv.Namespace(t, c.client, "auth-")
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cassandra-lock-role",
			Labels: map[string]string{batonv1.LabelCassandraSecret: "true"}},
			StringData: map[string]string{"username": "tenant_e2e", "password": password, "ca.crt": string(ca.PEM)}}
		if err := c.client.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		dl, dep, _ := batonnode.Workload{Namespace: ns, Name: "demo", Replicas: 1, Mode: batonv1.ModeBlocking,
			Policy: batonv1.TrafficReadinessGate, Lease: 5 * time.Second}.Objects()
		dl.Spec.Cassandra = &batonv1.CassandraConnection{ContactPoints: []string{authCassandra.host()}, Keyspace: authKeyspace,
			CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: secret.Name}, TLSSecretRef: &batonv1.TLSSecretRef{Name: secret.Name},
			TLSServerName: authServerName}
		for _, o := range []client.Object{dl, dep} {
			if err := c.client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		return ns
	}
	good, bad := deploy("tenant-e2e-s3cret"), deploy("not-the-password")

	holder, token := waitForOneReady(t, ctx, c, good, 1)
	t.Logf("holder %s with token %d over TLS with the tenant's login", holder.Name, token)
	reachable := waitForStoreCondition(t, ctx, c, good, metav1.ConditionTrue, "")
	t.Logf("StoreReachable: %s", reachable.Message)

	// The wrong password: the sidecar ends (and is restarted) instead of retrying for ever.
	var pod corev1.Pod
	testenv.WaitFor(t, "the sidecar with a wrong password to stop", 2*time.Minute, func() bool {
		pods := demoPods(t, ctx, c, bad)
		if len(pods) != 1 {
			return false
		}
		pod = pods[0]
		st := containerStatus(pod, inject.ContainerName)
		return st.RestartCount > 0 || st.State.Terminated != nil
	})
	logs, _ := exec.CommandContext(ctx, c.kubectl, "--kubeconfig", c.node.Kubeconfig, "logs", "-n", bad, pod.Name,
		"-c", inject.ContainerName, "--previous").CombinedOutput()
	if !strings.Contains(string(logs), "refusing to start") || !strings.Contains(string(logs), "refused the login") {
		t.Errorf("the sidecar's last words do not say Cassandra refused the login:\n%s", logs)
	}
	if strings.Contains(string(logs), "not-the-password") {
		t.Errorf("the sidecar's log shows the password:\n%s", logs)
	}
	refused := waitForStoreCondition(t, ctx, c, bad, metav1.ConditionFalse, controllers.ReasonAuthenticationFailed)
	if strings.Contains(refused.Message, "not-the-password") || strings.Contains(refused.Message, "tenant_e2e") {
		t.Errorf("StoreReachable shows the login: %s", refused.Message)
	}
	t.Logf("wrong password: StoreReachable %s: %s", refused.Reason, refused.Message)
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
