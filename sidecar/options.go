package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/lock"
)

// Mode says when the sidecar acquires its locks.
type Mode string

// Modes.
const (
	// ModeBlocking acquires every declared lock at start and holds it, queueing again after a loss.
	ModeBlocking Mode = "Blocking"
	// ModeTry acquires a lock only when the application asks for it over the API.
	ModeTry Mode = "Try"
)

// TrafficPolicy says how the sidecar tells Kubernetes that its pod holds the locks.
type TrafficPolicy string

// Traffic policies.
const (
	// ReadinessGate patches the pod's baton.dev/lock-held condition: standbys are NotReady.
	ReadinessGate TrafficPolicy = "ReadinessGate"
	// Label sets the pod label baton.dev/role=holder|standby; pods stay Ready.
	Label TrafficPolicy = "Label"
	// NoTraffic leaves the pod alone.
	NoTraffic TrafficPolicy = "None"
)

// Scope says who shares a lock ID.
type Scope string

// Scopes.
const (
	// ScopeNamespace scopes lock IDs to the pod's namespace.
	ScopeNamespace Scope = "Namespace"
	// ScopeGlobal shares lock IDs across namespaces and clusters that use the same keyspace.
	ScopeGlobal Scope = "Global"
)

// Names fixed by the product (BRIEF §1).
const (
	DefaultSocketPath      = "/var/run/baton/baton.sock"
	DefaultMetricsAddr     = "127.0.0.1:9464"
	DefaultShutdownTimeout = 10 * time.Second
	// MaxLocks is the most lock IDs one pod may declare.
	MaxLocks = 16
	// maxClusterName bounds --cassandra-cluster-name, as the API bounds status.cassandraClusterName.
	maxClusterName = 256
)

// lockIDPattern is what a declared lock ID may look like: it becomes part of a store key and a
// Kubernetes condition message.
var lockIDPattern = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?$`)

// Options is the sidecar's configuration. Every field has a flag and an environment variable (what
// the injecting webhook sets); flags win.
type Options struct {
	LockName        string        // name of the DistributedLock the pod references
	LockIDs         []string      // the lock IDs the pod holds
	Mode            Mode          // Blocking or Try
	Lease           time.Duration // lease duration
	Scope           Scope         // Namespace or Global
	TrafficPolicy   TrafficPolicy // ReadinessGate, Label or None
	Cassandra       CassandraOptions
	Pod             PodIdentity
	SocketPath      string        // unix socket of the localhost API
	ListenTCP       string        // optional loopback TCP address of the API ("" = off)
	MetricsAddr     string        // loopback address of the Prometheus metrics
	ShutdownTimeout time.Duration // bound on releasing locks at SIGTERM
	Kubeconfig      string        // kubeconfig outside a cluster ("" = in-cluster config)
}

// CassandraOptions says how to reach the lock store.
type CassandraOptions struct {
	ContactPoints     []string
	Keyspace          string
	LocalDC           string
	Consistency       string // QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL
	SerialConsistency string // SERIAL or LOCAL_SERIAL
	UsernameFile      string // files, e.g. from a mounted Secret
	PasswordFile      string
	TLSCAFile         string
	TLSCertFile       string
	TLSKeyFile        string
	TLSServerName     string
	// ClusterName, when set, is the cluster_name the Cassandra cluster must carry: the one the
	// DistributedLock lives on (status.cassandraClusterName, injected by the webhook). The sidecar
	// refuses to start on another cluster.
	ClusterName string
}

// PodIdentity is the pod the sidecar runs in, from the downward API.
type PodIdentity struct {
	Namespace, Name, UID string
}

// field describes one option for flags, environment and error messages.
type field struct {
	flag, env, usage string
}

var fields = map[string]field{
	"lock-name":        {"lock-name", "BATON_LOCK_NAME", "name of the DistributedLock this pod references"},
	"locks":            {"locks", "BATON_LOCK_IDS", "comma-separated lock IDs to hold"},
	"mode":             {"mode", "BATON_MODE", "Blocking (hold from start) or Try (acquire on request)"},
	"lease":            {"lease", "BATON_LEASE", "lease duration, e.g. 15s"},
	"scope":            {"scope", "BATON_SCOPE", "Namespace or Global"},
	"traffic-policy":   {"traffic-policy", "BATON_TRAFFIC_POLICY", "ReadinessGate, Label or None"},
	"cassandra-hosts":  {"cassandra-hosts", "BATON_CASSANDRA_HOSTS", "comma-separated Cassandra contact points (host or host:port)"},
	"keyspace":         {"keyspace", "BATON_CASSANDRA_KEYSPACE", "Cassandra keyspace holding baton's tables"},
	"local-dc":         {"local-dc", "BATON_CASSANDRA_LOCAL_DC", "local data centre for LOCAL_* consistencies and routing"},
	"consistency":      {"consistency", "BATON_CASSANDRA_CONSISTENCY", "QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL"},
	"serial":           {"serial-consistency", "BATON_CASSANDRA_SERIAL_CONSISTENCY", "SERIAL or LOCAL_SERIAL"},
	"username-file":    {"cassandra-username-file", "BATON_CASSANDRA_USERNAME_FILE", "file holding the Cassandra user name"},
	"password-file":    {"cassandra-password-file", "BATON_CASSANDRA_PASSWORD_FILE", "file holding the Cassandra password"},
	"tls-ca":           {"cassandra-tls-ca", "BATON_CASSANDRA_TLS_CA", "CA bundle to verify Cassandra's certificate (enables TLS)"},
	"tls-cert":         {"cassandra-tls-cert", "BATON_CASSANDRA_TLS_CERT", "client certificate for Cassandra mutual TLS"},
	"tls-key":          {"cassandra-tls-key", "BATON_CASSANDRA_TLS_KEY", "client key for Cassandra mutual TLS"},
	"tls-server-name":  {"cassandra-tls-server-name", "BATON_CASSANDRA_TLS_SERVER_NAME", "name to verify in Cassandra's certificate"},
	"cluster-name":     {"cassandra-cluster-name", "BATON_CASSANDRA_CLUSTER_NAME", "refuse to start unless Cassandra's cluster_name is this (empty: no check)"},
	"pod-namespace":    {"pod-namespace", "POD_NAMESPACE", "namespace of this pod (downward API)"},
	"pod-name":         {"pod-name", "POD_NAME", "name of this pod (downward API)"},
	"pod-uid":          {"pod-uid", "POD_UID", "UID of this pod (downward API)"},
	"socket":           {"socket", "BATON_SOCKET", "unix socket of the localhost API"},
	"listen-tcp":       {"listen-tcp", "BATON_LISTEN_TCP", "also serve the API on this loopback TCP address (empty: off)"},
	"metrics-addr":     {"metrics-addr", "BATON_METRICS_ADDR", "loopback address of the Prometheus metrics"},
	"shutdown-timeout": {"shutdown-timeout", "BATON_SHUTDOWN_TIMEOUT", "how long releasing locks may take at SIGTERM"},
	"kubeconfig":       {"kubeconfig", "BATON_KUBECONFIG", "kubeconfig for running outside a cluster (default: in-cluster config)"},
}

// name returns how an error message names a field: "--flag (ENV)".
func name(key string) string {
	f := fields[key]
	return fmt.Sprintf("--%s (%s)", f.flag, f.env)
}

// ParseOptions reads options from args and, for anything not given as a flag, from getenv. It
// validates them and returns every problem at once.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	fs := flag.NewFlagSet("baton-sidecar", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	raw := make(map[string]*string, len(fields))
	for key, f := range fields {
		raw[key] = fs.String(f.flag, "", f.usage+" (env "+f.env+")")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Options{}, err
		}
		return Options{}, fmt.Errorf("sidecar: %w (run with -h for the list of settings)", err)
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("sidecar: unexpected argument %q: every setting is a --flag or an environment variable", fs.Arg(0))
	}
	get := func(key string) string {
		if v := strings.TrimSpace(*raw[key]); v != "" {
			return v
		}
		return strings.TrimSpace(getenv(fields[key].env))
	}
	var errs []error
	dur := func(key string, def time.Duration) time.Duration {
		v := get(key)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is %q: want a duration such as 15s", name(key), v))
		}
		return d
	}
	o := Options{
		LockName:      get("lock-name"),
		LockIDs:       splitList(get("locks")),
		Mode:          Mode(or(get("mode"), string(ModeBlocking))),
		Lease:         dur("lease", lock.DefaultLease),
		Scope:         Scope(or(get("scope"), string(ScopeNamespace))),
		TrafficPolicy: TrafficPolicy(or(get("traffic-policy"), string(ReadinessGate))),
		Cassandra: CassandraOptions{
			ContactPoints:     splitList(get("cassandra-hosts")),
			Keyspace:          or(get("keyspace"), "baton"),
			LocalDC:           get("local-dc"),
			Consistency:       strings.ToUpper(or(get("consistency"), "QUORUM")),
			SerialConsistency: strings.ToUpper(or(get("serial"), "SERIAL")),
			UsernameFile:      get("username-file"),
			PasswordFile:      get("password-file"),
			TLSCAFile:         get("tls-ca"),
			TLSCertFile:       get("tls-cert"),
			TLSKeyFile:        get("tls-key"),
			TLSServerName:     get("tls-server-name"),
			ClusterName:       get("cluster-name"),
		},
		Pod:             PodIdentity{Namespace: get("pod-namespace"), Name: get("pod-name"), UID: get("pod-uid")},
		SocketPath:      or(get("socket"), DefaultSocketPath),
		ListenTCP:       get("listen-tcp"),
		MetricsAddr:     or(get("metrics-addr"), DefaultMetricsAddr),
		ShutdownTimeout: dur("shutdown-timeout", DefaultShutdownTimeout),
		Kubeconfig:      get("kubeconfig"),
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("sidecar: invalid configuration:\n  %w", joinLines(errs))
	}
	o.Cassandra.dropAbsentClientCert()
	return o, o.Validate()
}

// dropAbsentClientCert forgets a client certificate whose certificate and key files both do not
// exist: the injecting webhook always names them inside the mounted TLS Secret, which may hold
// only a CA. One file without the other stays an error (Validate reports it).
func (c *CassandraOptions) dropAbsentClientCert() {
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		return
	}
	_, certErr := os.Stat(c.TLSCertFile)
	_, keyErr := os.Stat(c.TLSKeyFile)
	if errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist) {
		c.TLSCertFile, c.TLSKeyFile = "", ""
	}
}

// Validate checks every option and returns all problems at once, each naming the flag, its
// environment variable and what to do.
func (o Options) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %s", name(key), fmt.Sprintf(format, args...)))
	}
	switch n := len(o.LockIDs); {
	case n == 0:
		bad("locks", "is empty: declare 1 to %d lock IDs, e.g. orders,payments", MaxLocks)
	case n > MaxLocks:
		bad("locks", "has %d lock IDs: at most %d", n, MaxLocks)
	}
	seen := make(map[string]bool)
	for _, id := range o.LockIDs {
		if !lockIDPattern.MatchString(id) {
			bad("locks", "has %q: a lock ID is 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit", id)
		}
		if seen[id] {
			bad("locks", "names %q twice", id)
		}
		seen[id] = true
	}
	if o.Mode != ModeBlocking && o.Mode != ModeTry {
		bad("mode", "is %q: use Blocking or Try", o.Mode)
	}
	if o.Lease < lock.MinLease || o.Lease > lock.MaxLease {
		bad("lease", "is %v: use %v to %v", o.Lease, lock.MinLease, lock.MaxLease)
	}
	if o.Scope != ScopeNamespace && o.Scope != ScopeGlobal {
		bad("scope", "is %q: use Namespace or Global", o.Scope)
	}
	if !slices.Contains([]TrafficPolicy{ReadinessGate, Label, NoTraffic}, o.TrafficPolicy) {
		bad("traffic-policy", "is %q: use ReadinessGate, Label or None", o.TrafficPolicy)
	}
	c := o.Cassandra
	if len(c.ContactPoints) == 0 {
		bad("cassandra-hosts", "is empty: give at least one Cassandra contact point, e.g. cassandra.db:9042")
	}
	if !slices.Contains([]string{"QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"}, c.Consistency) {
		bad("consistency", "is %q: a lock needs QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL", c.Consistency)
	}
	if c.SerialConsistency != "SERIAL" && c.SerialConsistency != "LOCAL_SERIAL" {
		bad("serial", "is %q: use SERIAL or LOCAL_SERIAL", c.SerialConsistency)
	}
	if strings.HasPrefix(c.Consistency, "LOCAL_") || c.SerialConsistency == "LOCAL_SERIAL" {
		if c.LocalDC == "" {
			bad("local-dc", "is empty but %s/%s are data-centre local: name the local data centre", c.Consistency, c.SerialConsistency)
		}
	}
	if len(c.ClusterName) > maxClusterName || strings.ContainsAny(c.ClusterName, "\n\r\x00") {
		bad("cluster-name", "is %q: give the cluster_name of the Cassandra cluster (one line, at most %d characters), or leave it empty", c.ClusterName, maxClusterName)
	}
	if (c.UsernameFile == "") != (c.PasswordFile == "") {
		bad("password-file", "and %s must be given together", name("username-file"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("tls-key", "and %s must be given together for mutual TLS", name("tls-cert"))
	}
	for key, path := range map[string]string{"username-file": c.UsernameFile, "password-file": c.PasswordFile,
		"tls-ca": c.TLSCAFile, "tls-cert": c.TLSCertFile, "tls-key": c.TLSKeyFile} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			bad(key, "cannot be read: %v", err)
		}
	}
	p := o.Pod
	for key, v := range map[string]string{"pod-namespace": p.Namespace, "pod-name": p.Name, "pod-uid": p.UID} {
		if v == "" {
			bad(key, "is empty: set it from the downward API (fieldRef metadata.%s)", strings.TrimPrefix(key, "pod-"))
		} else if strings.ContainsAny(v, "/# \t\n") {
			bad(key, "is %q: it must not contain '/', '#' or spaces", v)
		}
	}
	if o.SocketPath == "" || !strings.HasPrefix(o.SocketPath, "/") {
		bad("socket", "is %q: give an absolute path", o.SocketPath)
	}
	if o.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", "is %v: give a positive duration", o.ShutdownTimeout)
	}
	if len(errs) > 0 {
		return fmt.Errorf("sidecar: invalid configuration:\n  %w", joinLines(errs))
	}
	return nil
}

// Owner returns the lock owner identity of this pod: namespace/name/uid.
func (o Options) Owner() string { return batonv1.OwnerIdentity(o.Pod.Namespace, o.Pod.Name, o.Pod.UID) }

// StoreLockID maps a declared lock ID to its key in the store: "<namespace>/<id>", or
// "_global/<id>" for the Global scope.
func (o Options) StoreLockID(id string) string {
	return batonv1.StoreLockID(batonv1.LockScope(o.Scope), o.Pod.Namespace, id)
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// joinLines joins errors one per line, indented under the summary.
func joinLines(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	slices.Sort(msgs)
	return errors.New(strings.Join(msgs, "\n  "))
}

// Usage writes every setting with its flag, environment variable and meaning.
func Usage(w io.Writer) {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintln(w, "baton sidecar settings (a flag wins over its environment variable):")
	for _, k := range keys {
		f := fields[k]
		fmt.Fprintf(w, "  --%-28s %-36s %s\n", f.flag, f.env, f.usage)
	}
}
