package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/testpki"
)

// env returns a getenv over a map, starting from a valid configuration.
func env(overrides map[string]string) func(string) string {
	m := map[string]string{
		"BATON_LOCK_IDS":        "orders, payments",
		"BATON_CASSANDRA_HOSTS": "cassandra-0.db:9042,cassandra-1.db",
		"POD_NAMESPACE":         "shop",
		"POD_NAME":              "worker-7f9c",
		"POD_UID":               "2d1e-44",
	}
	for k, v := range overrides {
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

func TestParseOptionsDefaults(t *testing.T) {
	o, err := ParseOptions(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Mode: batonv1.ModeBlocking, Lease: 15 * time.Second, Scope: batonv1.ScopeNamespace, TrafficPolicy: batonv1.TrafficReadinessGate,
		SocketPath: "/var/run/baton/baton.sock", MetricsAddr: "127.0.0.1:9464", ShutdownTimeout: 10 * time.Second}
	if o.Mode != want.Mode || o.Lease != want.Lease || o.Scope != want.Scope || o.TrafficPolicy != want.TrafficPolicy ||
		o.SocketPath != want.SocketPath || o.MetricsAddr != want.MetricsAddr || o.ShutdownTimeout != want.ShutdownTimeout {
		t.Fatalf("defaults: %+v", o)
	}
	if strings.Join(o.LockIDs, ",") != "orders,payments" || len(o.Cassandra.ContactPoints) != 2 || o.Cassandra.Keyspace != "baton" ||
		o.Cassandra.Consistency != gocql.Quorum || o.Cassandra.SerialConsistency != gocql.Serial {
		t.Fatalf("parsed: %+v", o)
	}
	if o.Owner() != "shop/worker-7f9c/2d1e-44" || o.StoreLockID("orders") != "shop/orders" {
		t.Fatalf("owner %q, store ID %q", o.Owner(), o.StoreLockID("orders"))
	}
	o.Scope = batonv1.ScopeGlobal
	if got := o.StoreLockID("orders"); got != "_global/orders" {
		t.Fatalf("global store ID %q", got)
	}
}

// TestClusterNameOption: the cluster the lock lives on comes from the webhook's environment or a
// flag; without it the sidecar checks no cluster name.
func TestClusterNameOption(t *testing.T) {
	o, err := ParseOptions(nil, env(nil))
	if err != nil || o.Cassandra.ClusterName != "" {
		t.Fatalf("default: %q, %v; want no cluster check", o.Cassandra.ClusterName, err)
	}
	o, err = ParseOptions(nil, env(map[string]string{"BATON_CASSANDRA_CLUSTER_NAME": " Prod Cluster 1 "}))
	if err != nil || o.Cassandra.ClusterName != "Prod Cluster 1" {
		t.Fatalf("from the environment: %q, %v", o.Cassandra.ClusterName, err)
	}
	o, err = ParseOptions([]string{"--cassandra-cluster-name", "eu"}, env(map[string]string{"BATON_CASSANDRA_CLUSTER_NAME": "us"}))
	if err != nil || o.Cassandra.ClusterName != "eu" {
		t.Fatalf("the flag should win: %q, %v", o.Cassandra.ClusterName, err)
	}
}

// TestHintOptions: hand-off hints are off unless a port is set, and then listen on the pod IP.
func TestHintOptions(t *testing.T) {
	o, err := ParseOptions(nil, env(map[string]string{"POD_IP": "198.18.0.7"}))
	if err != nil || o.HintPort != 0 {
		t.Fatalf("default: port %d, %v; want hints off", o.HintPort, err)
	}
	for ip, want := range map[string]string{"198.18.0.7": "198.18.0.7:9465", "2001:db8::7": "[2001:db8::7]:9465", "::ffff:198.18.0.7": "198.18.0.7:9465"} {
		o, err = ParseOptions(nil, env(map[string]string{"POD_IP": ip, "BATON_HINT_PORT": "9465"}))
		if err != nil {
			t.Fatal(err)
		}
		if addr, err := o.HintAddr(); err != nil || addr.String() != want {
			t.Errorf("pod IP %s: hint address %v, %v; want %s", ip, addr, err, want)
		}
	}
	// A development setup: several sidecars on one host, each on a loopback address of its own.
	o, err = ParseOptions(nil, env(map[string]string{"POD_IP": "127.0.3.1", "BATON_HINT_PORT": "9465", "BATON_HINT_ALLOW_LOOPBACK": "true"}))
	if err != nil || !o.HintAllowLoopback {
		t.Fatalf("loopback pod IP with %s=true: %+v, %v; want it accepted", sidecarcontract.HintAllowLoopback.Env(), o, err)
	}
}

func TestParseOptionsFlagsWin(t *testing.T) {
	o, err := ParseOptions([]string{"--mode=Try", "--lease", "5s", "--locks", "x"}, env(map[string]string{"BATON_MODE": "Blocking"}))
	if err != nil {
		t.Fatal(err)
	}
	if o.Mode != batonv1.ModeTry || o.Lease != 5*time.Second || len(o.LockIDs) != 1 || o.LockIDs[0] != "x" {
		t.Fatalf("flags did not win: %+v", o)
	}
}

// TestEnumSettingsIgnoreCase: mode, scope and traffic policy take any case, as the consistencies
// do, and come out canonical; an unknown value is still reported.
func TestEnumSettingsIgnoreCase(t *testing.T) {
	o, err := ParseOptions([]string{"--mode=try", "--scope", "GLOBAL", "--traffic-policy=none", "--consistency=local_quorum", "--local-dc=dc1"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o.Mode != batonv1.ModeTry || o.Scope != batonv1.ScopeGlobal || o.TrafficPolicy != batonv1.TrafficNone || o.Cassandra.Consistency != gocql.LocalQuorum {
		t.Fatalf("mode %q, scope %q, traffic policy %q, consistency %v", o.Mode, o.Scope, o.TrafficPolicy, o.Cassandra.Consistency)
	}
	if _, err := ParseOptions([]string{"--mode=tryhard"}, env(nil)); err == nil || !strings.Contains(err.Error(), `"tryhard": use Blocking or Try`) {
		t.Fatalf("unknown mode: %v", err)
	}
}

func TestParseOptionsErrors(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "user")
	if err := os.WriteFile(secret, []byte("baton"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string // every substring must appear
	}{
		{"no locks", nil, map[string]string{"BATON_LOCK_IDS": " , "}, []string{"--lock-ids (BATON_LOCK_IDS) is empty"}},
		{"too many locks", nil, map[string]string{"BATON_LOCK_IDS": strings.Repeat("a,", 16) + "b"}, []string{"at most 16"}},
		{"bad lock ID", nil, map[string]string{"BATON_LOCK_IDS": "ok,-bad"}, []string{`has "-bad"`}},
		{"duplicate lock", nil, map[string]string{"BATON_LOCK_IDS": "a,a"}, []string{`names "a" twice`}},
		{"bad mode", nil, map[string]string{"BATON_MODE": "Sometimes"}, []string{`--mode (BATON_MODE) is "Sometimes": use Blocking or Try`}},
		{"bad lease", nil, map[string]string{"BATON_LEASE": "forever"}, []string{"--lease (BATON_LEASE)", "duration"}},
		{"short lease", []string{"--lease=10ms"}, nil, []string{"--lease (BATON_LEASE) is 10ms"}},
		{"bad scope", nil, map[string]string{"BATON_SCOPE": "Cluster"}, []string{"use Namespace or Global"}},
		{"bad yield when unready", nil, map[string]string{"BATON_YIELD_WHEN_UNREADY": "soon"}, []string{"--yield-when-unready (BATON_YIELD_WHEN_UNREADY)", "duration"}},
		{"short yield when unready", []string{"--yield-when-unready=200ms"}, nil, []string{"--yield-when-unready (BATON_YIELD_WHEN_UNREADY) is 200ms: use 1s to 1h, or 0"}},
		{"bad traffic", nil, map[string]string{"BATON_TRAFFIC_POLICY": "DNS"}, []string{"use ReadinessGate, Label or None"}},
		{"no hosts", nil, map[string]string{"BATON_CASSANDRA_HOSTS": ""}, []string{"--cassandra-hosts (BATON_CASSANDRA_HOSTS) is empty"}},
		{"weak consistency", nil, map[string]string{"BATON_CASSANDRA_CONSISTENCY": "one"}, []string{`is "ONE": a lock needs QUORUM`}},
		{"local without dc", nil, map[string]string{"BATON_CASSANDRA_CONSISTENCY": "LOCAL_QUORUM"}, []string{"--cassandra-local-dc", "name the local data centre"}},
		{"user without password", nil, map[string]string{"BATON_CASSANDRA_USERNAME_FILE": secret}, []string{"must be given together"}},
		{"missing secret file", nil, map[string]string{"BATON_CASSANDRA_USERNAME_FILE": secret, "BATON_CASSANDRA_PASSWORD_FILE": filepath.Join(dir, "nope")}, []string{"--cassandra-password-file", "cannot be read"}},
		{"cert without key", nil, map[string]string{"BATON_CASSANDRA_TLS_CERT": secret}, []string{"mutual TLS"}},
		{"no pod", nil, map[string]string{"POD_NAME": "", "POD_UID": ""}, []string{"--pod-name (POD_NAME) is empty", "--pod-uid (POD_UID) is empty", "downward API"}},
		{"bad pod name", nil, map[string]string{"POD_NAME": "a/b"}, []string{"must not contain"}},
		{"relative socket", []string{"--socket=baton.sock"}, nil, []string{"absolute path"}},
		{"multi-line cluster name", nil, map[string]string{"BATON_CASSANDRA_CLUSTER_NAME": "prod\nother"}, []string{"--cassandra-cluster-name (BATON_CASSANDRA_CLUSTER_NAME)", "one line"}},
		{"long cluster name", []string{"--cassandra-cluster-name=" + strings.Repeat("c", 257)}, nil, []string{"at most 256"}},
		{"bad hint port", nil, map[string]string{"BATON_HINT_PORT": "udp"}, []string{"--hint-port (BATON_HINT_PORT) is \"udp\"", "0 for no hints"}},
		{"hint port out of range", []string{"--hint-port=70000"}, nil, []string{"--hint-port (BATON_HINT_PORT) is 70000"}},
		{"hints without pod IP", nil, map[string]string{"BATON_HINT_PORT": "9465"}, []string{"--pod-ip (POD_IP)", "status.podIP", "BATON_HINT_PORT to 0"}},
		{"hints on every address", nil, map[string]string{"BATON_HINT_PORT": "9465", "POD_IP": "0.0.0.0"}, []string{"--pod-ip (POD_IP) is \"0.0.0.0\""}},
		{"hints on loopback", nil, map[string]string{"BATON_HINT_PORT": "9465", "POD_IP": "127.0.3.1"}, []string{"--pod-ip (POD_IP) is \"127.0.3.1\", a loopback address", "BATON_HINT_ALLOW_LOOPBACK=true"}},
		{"hints on mapped loopback", nil, map[string]string{"BATON_HINT_PORT": "9465", "POD_IP": "::ffff:127.0.0.1"}, []string{"a loopback address"}},
		{"bad loopback switch", nil, map[string]string{"BATON_HINT_ALLOW_LOOPBACK": "yes please"}, []string{"--hint-allow-loopback (BATON_HINT_ALLOW_LOOPBACK) is \"yes please\""}},
		{"metrics address with a host name", []string{"--metrics-addr=metrics.local:9464"}, nil, []string{"--metrics-addr (BATON_METRICS_ADDR) is \"metrics.local:9464\"", ":<port> for every address"}},
		{"unknown flag", []string{"--colour"}, nil, []string{"flag provided but not defined", "-h"}},
		{"stray argument", []string{"run"}, nil, []string{`unexpected argument "run"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseOptions(tc.args, env(tc.env))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// Several problems are reported together.
	_, err := ParseOptions(nil, env(map[string]string{"BATON_MODE": "x", "BATON_SCOPE": "y"}))
	if err == nil || !strings.Contains(err.Error(), "--mode") || !strings.Contains(err.Error(), "--scope") {
		t.Fatalf("want both problems in %v", err)
	}
	if _, err := ParseOptions([]string{"-h"}, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

func TestUsageListsEverySetting(t *testing.T) {
	var b strings.Builder
	Usage(&b)
	for _, s := range sidecarcontract.Settings() {
		if !strings.Contains(b.String(), "--"+s.Flag()) || !strings.Contains(b.String(), s.Env()) {
			t.Errorf("usage misses %s", s)
		}
	}
}

func TestTLSSecretWithOnlyACA(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t)
	caFile := testpki.WriteFile(t, dir, "ca.crt", ca.PEM)
	o, err := ParseOptions(nil, env(map[string]string{"BATON_CASSANDRA_TLS_CA": caFile,
		"BATON_CASSANDRA_TLS_CERT": filepath.Join(dir, "tls.crt"), "BATON_CASSANDRA_TLS_KEY": filepath.Join(dir, "tls.key")}))
	if err != nil {
		t.Fatalf("a TLS Secret with only a CA must be accepted: %v", err)
	}
	if tls := o.Cassandra.TLS; tls == nil || tls.Cert != nil || tls.Key != nil || string(tls.CA) != string(ca.PEM) {
		t.Fatalf("client certificate should be dropped, CA kept: %+v", o.Cassandra.TLS)
	}
	cert := testpki.WriteFile(t, dir, "tls.crt", ca.Issue(t, "baton").Cert)
	_, err = ParseOptions(nil, env(map[string]string{"BATON_CASSANDRA_TLS_CERT": cert,
		"BATON_CASSANDRA_TLS_KEY": filepath.Join(dir, "tls.key")}))
	if err == nil || !strings.Contains(err.Error(), "--cassandra-tls-key") {
		t.Fatalf("a certificate without its key must be rejected: %v", err)
	}
}

// TestCassandraSettings: credentials and TLS files are read into the connection, and their
// problems are reported with the others.
func TestCassandraSettings(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t)
	o, err := ParseOptions([]string{"--cassandra-tls-server-name", "cassandra.db"}, env(map[string]string{
		"BATON_CASSANDRA_USERNAME_FILE": testpki.WriteFile(t, dir, "user", []byte("baton\n")),
		"BATON_CASSANDRA_PASSWORD_FILE": testpki.WriteFile(t, dir, "pass", []byte("s3cret\n")),
		"BATON_CASSANDRA_TLS_CA":        testpki.WriteFile(t, dir, "ca.crt", ca.PEM),
		"BATON_CASSANDRA_LOCAL_DC":      "dc1", "BATON_CASSANDRA_CONSISTENCY": "local_quorum",
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := o.Cassandra
	if c.Username != "baton" || c.Password != "s3cret" || c.TLS == nil || c.TLS.ServerName != "cassandra.db" ||
		c.LocalDC != "dc1" || c.Consistency != gocql.LocalQuorum {
		t.Errorf("connection %#v, TLS %+v", c, c.TLS)
	}
	if strings.Contains(fmt.Sprintf("%+v %#v", o, o), "s3cret") {
		t.Error("printing the options shows the password")
	}
	_, err = ParseOptions(nil, env(map[string]string{"BATON_MODE": "x",
		"BATON_CASSANDRA_TLS_CA": testpki.WriteFile(t, dir, "bad.crt", []byte("not a certificate"))}))
	if err == nil || !strings.Contains(err.Error(), "--mode (BATON_MODE)") || !strings.Contains(err.Error(), "--cassandra-tls-ca (BATON_CASSANDRA_TLS_CA)") {
		t.Errorf("want the mode and the CA problems together, got %v", err)
	}
}

// TestOutsideKubernetesFailsFirst: with a traffic policy that needs the Kubernetes API and no
// cluster to reach (no in-cluster environment, no kubeconfig), Run fails at once and says to use
// None, before it connects to Cassandra (unreachable here: it would retry until ctx ends).
func TestOutsideKubernetesFailsFirst(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	o, err := ParseOptions([]string{"--socket", filepath.Join(t.TempDir(), "baton.sock")},
		env(map[string]string{"BATON_CASSANDRA_HOSTS": "127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = Run(ctx, o, logr.Discard())
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "BATON_TRAFFIC_POLICY") || !strings.Contains(err.Error(), "None") {
		t.Fatalf("Run outside Kubernetes: %v (context: %v); want an immediate error that suggests BATON_TRAFFIC_POLICY=None", err, ctx.Err())
	}
	if _, statErr := os.Stat(o.SocketPath); statErr == nil {
		t.Error("the API socket was created before the configuration was known to work")
	}
}
