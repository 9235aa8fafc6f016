package sidecar

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	want := Options{Mode: ModeBlocking, Lease: 15 * time.Second, Scope: ScopeNamespace, TrafficPolicy: ReadinessGate,
		SocketPath: DefaultSocketPath, MetricsAddr: DefaultMetricsAddr, ShutdownTimeout: DefaultShutdownTimeout}
	if o.Mode != want.Mode || o.Lease != want.Lease || o.Scope != want.Scope || o.TrafficPolicy != want.TrafficPolicy ||
		o.SocketPath != want.SocketPath || o.MetricsAddr != want.MetricsAddr || o.ShutdownTimeout != want.ShutdownTimeout {
		t.Fatalf("defaults: %+v", o)
	}
	if strings.Join(o.LockIDs, ",") != "orders,payments" || len(o.Cassandra.ContactPoints) != 2 || o.Cassandra.Keyspace != "baton" ||
		o.Cassandra.Consistency != "QUORUM" || o.Cassandra.SerialConsistency != "SERIAL" {
		t.Fatalf("parsed: %+v", o)
	}
	if o.Owner() != "shop/worker-7f9c/2d1e-44" || o.StoreLockID("orders") != "shop/orders" {
		t.Fatalf("owner %q, store ID %q", o.Owner(), o.StoreLockID("orders"))
	}
	o.Scope = ScopeGlobal
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

func TestParseOptionsFlagsWin(t *testing.T) {
	o, err := ParseOptions([]string{"--mode=Try", "--lease", "5s", "--locks", "x"}, env(map[string]string{"BATON_MODE": "Blocking"}))
	if err != nil {
		t.Fatal(err)
	}
	if o.Mode != ModeTry || o.Lease != 5*time.Second || len(o.LockIDs) != 1 || o.LockIDs[0] != "x" {
		t.Fatalf("flags did not win: %+v", o)
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
		{"no locks", nil, map[string]string{"BATON_LOCK_IDS": " , "}, []string{"--locks (BATON_LOCK_IDS) is empty"}},
		{"too many locks", nil, map[string]string{"BATON_LOCK_IDS": strings.Repeat("a,", 16) + "b"}, []string{"at most 16"}},
		{"bad lock ID", nil, map[string]string{"BATON_LOCK_IDS": "ok,-bad"}, []string{`has "-bad"`}},
		{"duplicate lock", nil, map[string]string{"BATON_LOCK_IDS": "a,a"}, []string{`names "a" twice`}},
		{"bad mode", nil, map[string]string{"BATON_MODE": "Sometimes"}, []string{`--mode (BATON_MODE) is "Sometimes": use Blocking or Try`}},
		{"bad lease", nil, map[string]string{"BATON_LEASE": "forever"}, []string{"--lease (BATON_LEASE)", "duration"}},
		{"short lease", []string{"--lease=10ms"}, nil, []string{"--lease (BATON_LEASE) is 10ms"}},
		{"bad scope", nil, map[string]string{"BATON_SCOPE": "Cluster"}, []string{"use Namespace or Global"}},
		{"bad traffic", nil, map[string]string{"BATON_TRAFFIC_POLICY": "DNS"}, []string{"use ReadinessGate, Label or None"}},
		{"no hosts", nil, map[string]string{"BATON_CASSANDRA_HOSTS": ""}, []string{"--cassandra-hosts (BATON_CASSANDRA_HOSTS) is empty"}},
		{"weak consistency", nil, map[string]string{"BATON_CASSANDRA_CONSISTENCY": "one"}, []string{`is "ONE": a lock needs QUORUM`}},
		{"local without dc", nil, map[string]string{"BATON_CASSANDRA_CONSISTENCY": "LOCAL_QUORUM"}, []string{"--local-dc", "name the local data centre"}},
		{"user without password", nil, map[string]string{"BATON_CASSANDRA_USERNAME_FILE": secret}, []string{"must be given together"}},
		{"missing secret file", nil, map[string]string{"BATON_CASSANDRA_USERNAME_FILE": secret, "BATON_CASSANDRA_PASSWORD_FILE": filepath.Join(dir, "nope")}, []string{"--cassandra-password-file", "cannot be read"}},
		{"cert without key", nil, map[string]string{"BATON_CASSANDRA_TLS_CERT": secret}, []string{"mutual TLS"}},
		{"no pod", nil, map[string]string{"POD_NAME": "", "POD_UID": ""}, []string{"--pod-name (POD_NAME) is empty", "--pod-uid (POD_UID) is empty", "downward API"}},
		{"bad pod name", nil, map[string]string{"POD_NAME": "a/b"}, []string{"must not contain"}},
		{"relative socket", []string{"--socket=baton.sock"}, nil, []string{"absolute path"}},
		{"multi-line cluster name", nil, map[string]string{"BATON_CASSANDRA_CLUSTER_NAME": "prod\nother"}, []string{"--cassandra-cluster-name (BATON_CASSANDRA_CLUSTER_NAME)", "one line"}},
		{"long cluster name", []string{"--cassandra-cluster-name=" + strings.Repeat("c", 257)}, nil, []string{"at most 256"}},
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
	for _, f := range fields {
		if !strings.Contains(b.String(), "--"+f.flag) || !strings.Contains(b.String(), f.env) {
			t.Errorf("usage misses %s / %s", f.flag, f.env)
		}
	}
}

func TestTLSSecretWithOnlyACA(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := ParseOptions(nil, env(map[string]string{"BATON_CASSANDRA_TLS_CA": ca,
		"BATON_CASSANDRA_TLS_CERT": filepath.Join(dir, "tls.crt"), "BATON_CASSANDRA_TLS_KEY": filepath.Join(dir, "tls.key")}))
	if err != nil {
		t.Fatalf("a TLS Secret with only a CA must be accepted: %v", err)
	}
	if o.Cassandra.TLSCertFile != "" || o.Cassandra.TLSKeyFile != "" || o.Cassandra.TLSCAFile != ca {
		t.Fatalf("client certificate should be dropped, CA kept: %+v", o.Cassandra)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ParseOptions(nil, env(map[string]string{"BATON_CASSANDRA_TLS_CERT": filepath.Join(dir, "tls.crt"),
		"BATON_CASSANDRA_TLS_KEY": filepath.Join(dir, "tls.key")}))
	if err == nil || !strings.Contains(err.Error(), "--cassandra-tls-key") {
		t.Fatalf("a certificate without its key must be rejected: %v", err)
	}
}
