package sidecarcontract

import (
	"flag"
	"fmt"
	"io"
	"strings"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// Setting is one sidecar setting, named by its flag (without the dashes). Every setting is also
// an environment variable (Env), which is what the injecting webhook sets; a flag wins over its
// variable. The flag is the variable's name without BATON_, in lower case with dashes, and the
// operator's flag for the same setting has the same name.
type Setting string

// The sidecar's settings.
const (
	LockName      Setting = "lock-name"
	LockIDs       Setting = "lock-ids"
	Mode          Setting = "mode"
	Lease         Setting = "lease"
	Scope         Setting = "scope"
	TrafficPolicy Setting = "traffic-policy"
	// YieldWhenUnready is spec.yieldWhenUnready: 0 turns it off.
	YieldWhenUnready Setting = "yield-when-unready"
	// Handoff is spec.handoff.
	Handoff Setting = "handoff"

	CassandraHosts    Setting = "cassandra-hosts"
	Keyspace          Setting = "cassandra-keyspace"
	LocalDC           Setting = "cassandra-local-dc"
	Consistency       Setting = "cassandra-consistency"
	SerialConsistency Setting = "cassandra-serial-consistency"
	UsernameFile      Setting = "cassandra-username-file"
	PasswordFile      Setting = "cassandra-password-file"
	TLSCA             Setting = "cassandra-tls-ca"
	TLSCert           Setting = "cassandra-tls-cert"
	TLSKey            Setting = "cassandra-tls-key"
	TLSServerName     Setting = "cassandra-tls-server-name"
	ClusterName       Setting = "cassandra-cluster-name"

	PodNamespace Setting = "pod-namespace"
	PodName      Setting = "pod-name"
	PodUID       Setting = "pod-uid"
	PodIP        Setting = "pod-ip"

	Socket      Setting = "socket"
	ListenTCP   Setting = "listen-tcp"
	MetricsAddr Setting = "metrics-addr"
	HintPort    Setting = "hint-port"
	// HintAllowLoopback lets hints travel on loopback addresses: development setups only, where
	// several sidecars run on one host. The webhook never sets it.
	HintAllowLoopback Setting = "hint-allow-loopback"
	ShutdownTimeout   Setting = "shutdown-timeout"
	Kubeconfig        Setting = "kubeconfig"
)

// row is a setting's line in the table.
type row struct {
	setting           Setting
	env, usage, value string // value: the default
}

// table lists every setting in the order of the usage text: the lock, the lock store, the pod,
// the sidecar itself.
var table = []row{
	{LockName, "BATON_LOCK_NAME", "name of the DistributedLock this pod references", ""},
	{LockIDs, "BATON_LOCK_IDS", "comma-separated lock IDs to hold", ""},
	{Mode, "BATON_MODE", "Blocking (hold from start) or Try (acquire on request)", string(batonv1.ModeBlocking)},
	{Lease, "BATON_LEASE", "lease duration, e.g. 15s", batonv1.DefaultLeaseDuration},
	{Scope, "BATON_SCOPE", "Namespace or Global", string(batonv1.ScopeNamespace)},
	{TrafficPolicy, "BATON_TRAFFIC_POLICY", "ReadinessGate, Label or None (None outside Kubernetes: the others need its API)", string(batonv1.TrafficReadinessGate)},
	{Handoff, "BATON_HANDOFF", "QueueOrder, or NewestRevision: give the locks up and leave the queue while the operator marks this pod superseded (reads the pod from the Kubernetes API)", string(batonv1.HandoffQueueOrder)},
	{YieldWhenUnready, "BATON_YIELD_WHEN_UNREADY", "give the locks up once the pod's app containers have not been ready this long, and take none until they are (reads the pod from the Kubernetes API; 0: off)", "0s"},

	{CassandraHosts, "BATON_CASSANDRA_HOSTS", "comma-separated Cassandra contact points (host or host:port)", ""},
	{Keyspace, "BATON_CASSANDRA_KEYSPACE", "Cassandra keyspace holding baton's tables", "baton"},
	{LocalDC, "BATON_CASSANDRA_LOCAL_DC", "local data centre for LOCAL_* consistencies and routing", ""},
	{Consistency, "BATON_CASSANDRA_CONSISTENCY", ConsistencyChoices(), string(batonv1.ConsistencyQuorum)},
	{SerialConsistency, "BATON_CASSANDRA_SERIAL_CONSISTENCY", SerialConsistencyChoices(), string(batonv1.SerialConsistencySerial)},
	{UsernameFile, "BATON_CASSANDRA_USERNAME_FILE", "file holding the Cassandra user name", ""},
	{PasswordFile, "BATON_CASSANDRA_PASSWORD_FILE", "file holding the Cassandra password", ""},
	{TLSCA, "BATON_CASSANDRA_TLS_CA", "CA bundle to verify Cassandra's certificate (enables TLS)", ""},
	{TLSCert, "BATON_CASSANDRA_TLS_CERT", "client certificate for Cassandra mutual TLS", ""},
	{TLSKey, "BATON_CASSANDRA_TLS_KEY", "client key for Cassandra mutual TLS", ""},
	{TLSServerName, "BATON_CASSANDRA_TLS_SERVER_NAME", "name to verify in Cassandra's certificate", ""},
	{ClusterName, "BATON_CASSANDRA_CLUSTER_NAME", "refuse a Cassandra cluster whose cluster_name is not this (empty: no check)", ""},

	{PodNamespace, "POD_NAMESPACE", "namespace of this pod (downward API)", ""},
	{PodName, "POD_NAME", "name of this pod (downward API)", ""},
	{PodUID, "POD_UID", "UID of this pod (downward API)", ""},
	{PodIP, "POD_IP", "IP of this pod (downward API status.podIP): where other sidecars send hand-off hints", ""},

	{Socket, EnvSocket, "unix socket of the localhost API", SocketPath},
	{ListenTCP, "BATON_LISTEN_TCP", "also serve the API on this loopback TCP address (empty: off)", ""},
	{MetricsAddr, "BATON_METRICS_ADDR", "address of the Prometheus metrics: IP:port, or :port for every address of the pod", "127.0.0.1:9464"},
	{HintPort, "BATON_HINT_PORT", "UDP port on the pod IP for hand-off hints from other sidecars (0: off, waiters only poll)", "0"},
	{HintAllowLoopback, "BATON_HINT_ALLOW_LOOPBACK", "development only: take and send hand-off hints on loopback addresses, for several sidecars on one host (never in a pod: hint addresses come from the lock store)", "false"},
	{ShutdownTimeout, "BATON_SHUTDOWN_TIMEOUT", "how long releasing locks may take at SIGTERM", DefaultShutdownTimeout.String()},
	{Kubeconfig, "BATON_KUBECONFIG", "kubeconfig for running outside a cluster (default: in-cluster config)", ""},
}

// oldFlags are the names some settings' flags had before they were named after their variables;
// Register still accepts them, as deprecated aliases.
var oldFlags = map[Setting]string{
	LockIDs:           "locks",
	Keyspace:          "keyspace",
	LocalDC:           "local-dc",
	Consistency:       "consistency",
	SerialConsistency: "serial-consistency",
}

// rows indexes table by setting.
var rows = func() map[Setting]row {
	m := make(map[Setting]row, len(table))
	for _, r := range table {
		m[r.setting] = r
	}
	return m
}()

// Settings returns every sidecar setting, in the order of its usage text.
func Settings() []Setting {
	out := make([]Setting, len(table))
	for i, r := range table {
		out[i] = r.setting
	}
	return out
}

// CassandraSettings returns the settings that say how to reach the lock store: the sidecar's and
// also those of the baton CLI's mode without a sidecar.
func CassandraSettings() []Setting {
	return []Setting{CassandraHosts, Keyspace, LocalDC, Consistency, SerialConsistency, UsernameFile, PasswordFile,
		TLSCA, TLSCert, TLSKey, TLSServerName, ClusterName}
}

// Flag returns the setting's flag, without the dashes.
func (s Setting) Flag() string { return string(s) }

// OldFlag returns the deprecated name the setting's flag had before it was named after its
// variable, without the dashes; "" when it had none. Register accepts it.
func (s Setting) OldFlag() string { return oldFlags[s] }

// Env returns the setting's environment variable.
func (s Setting) Env() string { return rows[s].env }

// Usage returns what the setting means, in a few words.
func (s Setting) Usage() string { return rows[s].usage }

// Default returns the value used when neither the flag nor the variable is given ("" for none).
func (s Setting) Default() string { return rows[s].value }

// String names the setting the way error messages do: "--flag (ENV)".
func (s Setting) String() string { return fmt.Sprintf("--%s (%s)", s.Flag(), s.Env()) }

// Values reads settings from their flags, then their environment variables, then their defaults.
type Values struct {
	flags  map[Setting]*string
	old    map[Setting]*string // the deprecated aliases' values
	getenv func(string) string
}

// Register defines a string flag on fs for each of settings. After fs.Parse, the returned Values
// answer with the flag when it was given, else with the environment variable from getenv, else
// with the default. A setting whose flag was renamed also gets its old flag, marked deprecated in
// its usage; the new flag wins over the old one.
func Register(fs *flag.FlagSet, getenv func(string) string, settings ...Setting) *Values {
	v := &Values{flags: make(map[Setting]*string, len(settings)), old: map[Setting]*string{}, getenv: getenv}
	for _, s := range settings {
		v.flags[s] = fs.String(s.Flag(), "", s.Usage()+" (env "+s.Env()+")")
		if old, ok := oldFlags[s]; ok {
			v.old[s] = fs.String(old, "", "deprecated: use --"+s.Flag())
		}
	}
	return v
}

// Get returns the value of s, without surrounding white space: its flag when given, else its
// environment variable, else its default. A setting that was not registered has no flag.
func (v *Values) Get(s Setting) string {
	for _, f := range []*string{v.flags[s], v.old[s]} {
		if f == nil {
			continue
		}
		if x := strings.TrimSpace(*f); x != "" {
			return x
		}
	}
	if x := strings.TrimSpace(v.getenv(s.Env())); x != "" {
		return x
	}
	return s.Default()
}

// WriteUsage writes one line per setting: flag, environment variable, meaning and default.
func WriteUsage(w io.Writer, settings ...Setting) {
	for _, s := range settings {
		usage := s.Usage()
		if old := s.OldFlag(); old != "" {
			usage += " (--" + old + ": deprecated alias)"
		}
		if d := s.Default(); d != "" {
			usage += " (default " + d + ")"
		}
		fmt.Fprintf(w, "  --%-28s %-36s %s\n", s.Flag(), s.Env(), usage)
	}
}

// SplitList splits a comma-separated setting (lock IDs, contact points) into its non-empty,
// trimmed entries.
func SplitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// SettingError is a problem with one setting. Its message names the setting's flag and variable,
// then the problem and what to do, e.g. `--mode (BATON_MODE) is "x": use Blocking or Try`.
type SettingError struct {
	Setting Setting
	Problem string
}

// Errorf returns the SettingError of s with the problem format and args.
func Errorf(s Setting, format string, args ...any) *SettingError {
	return &SettingError{Setting: s, Problem: fmt.Sprintf(format, args...)}
}

// Error returns "--flag (ENV) problem".
func (e *SettingError) Error() string { return e.Setting.String() + " " + e.Problem }
