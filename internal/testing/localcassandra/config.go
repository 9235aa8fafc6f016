package localcassandra

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// DefaultVersion is the Cassandra release installed when Config.Version is
// empty: the latest 5.0 patch release on Maven Central when this was written.
const DefaultVersion = "5.0.9"

// Authenticator values for Config.Authenticator.
const (
	AllowAllAuthenticator = "AllowAllAuthenticator"
	PasswordAuthenticator = "PasswordAuthenticator"
)

// Config describes one local cluster. The zero value of every field but Name
// and Nodes has a usable default; see Single and Trio for the presets.
type Config struct {
	// Name identifies the cluster: it is the cluster_name suffix, the
	// default RunDir suffix and the prefix of progress lines.
	Name string
	// Nodes is the number of nodes (>= 1).
	Nodes int
	// IPs are the node addresses, one per node. Default: 127.0.0.1,
	// 127.0.0.2, ... (loopback aliases need no setup on Linux).
	IPs []string
	// NativePort is the CQL port shared by all nodes (each on its own IP).
	NativePort int
	// StoragePort is the inter-node port shared by all nodes.
	StoragePort int
	// HeapMB is the JVM heap (-Xms and -Xmx) per node. Default 512.
	HeapMB int
	// NumTokens is num_tokens per node. Default 16.
	NumTokens int
	// RunDir holds all node state. Default os.TempDir()/baton-cassandra-<Name>.
	// Start wipes it; Cluster.Stop and Teardown remove it.
	RunDir string
	// CacheDir is where versions are installed. Default
	// ${XDG_CACHE_HOME:-$HOME/.cache}/baton/cassandra.
	CacheDir string
	// Version is the cassandra-all version from Maven Central. Default DefaultVersion.
	Version string
	// Java is the java binary. Default $JAVA_HOME/bin/java, else java on PATH.
	Java string
	// Maven is the mvn binary. Default mvn on PATH.
	Maven string
	// Authenticator is the cassandra.yaml authenticator. Default
	// AllowAllAuthenticator. With PasswordAuthenticator the authorizer
	// becomes CassandraAuthorizer and clients log in as cassandra/cassandra.
	Authenticator string
	// PaxosVariant is cassandra.yaml paxos_variant. Default "v2".
	PaxosVariant string
	// ExtraYAML is appended verbatim to every node's cassandra.yaml.
	ExtraYAML string
	// ClientTLS, when set, is how the readiness probes connect: for nodes whose ExtraYAML
	// requires TLS of clients (client_encryption_options). Nil: plain connections.
	ClientTLS *tls.Config
	// FullJIT enables the C2 JIT compiler. By default nodes run with
	// -XX:TieredStopAtLevel=1 (C1 only), which starts a cluster much
	// faster on a small machine at the cost of peak throughput; set it for
	// benchmarks.
	FullJIT bool
	// ExtraJVMArgs are appended to the JVM flags (before the main class).
	ExtraJVMArgs []string
	// StartTimeout bounds waiting for nodes to come up. Default 3 minutes.
	StartTimeout time.Duration
	// StopTimeout bounds waiting after SIGTERM before SIGKILL. Default 15s.
	StopTimeout time.Duration
	// DieWithParent makes the JVMs get SIGKILL when the calling process
	// dies (tests). When false they run in their own session and outlive
	// the caller (CLI).
	DieWithParent bool
	// Progress receives human-readable progress lines. Nil: discarded.
	Progress io.Writer
	// Log receives debug-level details. Zero value: discarded.
	Log logr.Logger
}

// Single is the preset "single": one node at 127.0.0.1, CQL port 9042,
// storage port 7000.
func Single() Config {
	return Config{Name: "single", Nodes: 1, IPs: []string{"127.0.0.1"}, NativePort: 9042, StoragePort: 7000}
}

// Trio is the preset "trio": three nodes at 127.0.0.1-3, CQL port 9142,
// storage port 7100. It can run at the same time as Single.
func Trio() Config {
	return Config{Name: "trio", Nodes: 3, IPs: []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, NativePort: 9142, StoragePort: 7100}
}

// Demo is the node the demos start when no Single node runs: one node at 127.0.0.1, CQL port
// 9642, storage port 7600, apart from the presets above and from the tests' nodes.
func Demo() Config {
	return Config{Name: "demo", Nodes: 1, IPs: []string{"127.0.0.1"}, NativePort: 9642, StoragePort: 7600}
}

// Preset returns the preset called name ("single" or "trio").
func Preset(name string) (Config, error) {
	switch name {
	case "single":
		return Single(), nil
	case "trio":
		return Trio(), nil
	}
	return Config{}, fmt.Errorf("unknown cluster %q (want single or trio)", name)
}

// withDefaults returns cfg with defaults filled in, or an error if it is
// unusable.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Name == "" {
		return cfg, errors.New("localcassandra: Config.Name is empty")
	}
	if cfg.Nodes < 1 {
		return cfg, fmt.Errorf("localcassandra: Config.Nodes = %d, want >= 1", cfg.Nodes)
	}
	if len(cfg.IPs) == 0 {
		for i := 1; i <= cfg.Nodes; i++ {
			cfg.IPs = append(cfg.IPs, "127.0.0."+strconv.Itoa(i))
		}
	}
	if len(cfg.IPs) < cfg.Nodes {
		return cfg, fmt.Errorf("localcassandra: %d IPs for %d nodes", len(cfg.IPs), cfg.Nodes)
	}
	cfg.IPs = append([]string(nil), cfg.IPs[:cfg.Nodes]...)
	for _, ip := range cfg.IPs {
		if net.ParseIP(ip) == nil {
			return cfg, fmt.Errorf("localcassandra: %q is not an IP address", ip)
		}
	}
	if cfg.NativePort == 0 {
		cfg.NativePort = 9042
	}
	if cfg.StoragePort == 0 {
		cfg.StoragePort = 7000
	}
	if cfg.HeapMB == 0 {
		cfg.HeapMB = 512
	}
	if cfg.NumTokens == 0 {
		cfg.NumTokens = 16
	}
	if cfg.RunDir == "" {
		cfg.RunDir = filepath.Join(os.TempDir(), "baton-cassandra-"+cfg.Name)
	}
	if cfg.CacheDir == "" {
		base, err := os.UserCacheDir() // ${XDG_CACHE_HOME:-$HOME/.cache}
		if err != nil {
			return cfg, fmt.Errorf("localcassandra: no cache dir: %w", err)
		}
		cfg.CacheDir = filepath.Join(base, "baton", "cassandra")
	}
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	if cfg.Authenticator == "" {
		cfg.Authenticator = AllowAllAuthenticator
	}
	if cfg.PaxosVariant == "" {
		cfg.PaxosVariant = "v2"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 3 * time.Minute
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 15 * time.Second
	}
	switch cfg.Progress.(type) {
	case nil:
		cfg.Progress = io.Discard
	case *lockedWriter:
	default:
		cfg.Progress = &lockedWriter{w: cfg.Progress}
	}
	return cfg, nil
}

// lockedWriter serialises progress lines written from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// host returns "ip:nativeport" of node i (0-based).
func (cfg Config) host(i int) string {
	return net.JoinHostPort(cfg.IPs[i], strconv.Itoa(cfg.NativePort))
}

// nodeDir returns the state directory of node i (0-based).
func (cfg Config) nodeDir(i int) string {
	return filepath.Join(cfg.RunDir, "node"+strconv.Itoa(i+1))
}

func (cfg Config) progressf(format string, args ...any) {
	fmt.Fprintf(cfg.Progress, "cassandra %s: "+format+"\n", append([]any{cfg.Name}, args...)...)
}
