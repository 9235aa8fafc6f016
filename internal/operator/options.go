// Package operator runs baton's operator: the sidecar-injecting admission webhook (with its
// serving certificate), the DistributedLock status reconciler and the per-namespace sidecar
// permissions, under one controller-runtime manager with leader election, metrics and health
// endpoints. cmd/operator is a thin main around ParseOptions and Run.
package operator

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock/hintudp"
)

// Webhook certificate modes.
const (
	// CertsSelf: the operator creates and rotates the serving certificate in a Secret
	// (open-policy-agent/cert-controller) and writes its CA into the MutatingWebhookConfiguration.
	CertsSelf = "self"
	// CertsExternal: something else (cert-manager) writes the Secret and the caBundle; the
	// operator serves whatever appears in the certificate directory.
	CertsExternal = "external"
)

// Native-sidecar modes.
const (
	NativeAuto  = "auto"
	NativeTrue  = "true"
	NativeFalse = "false"
)

// DefaultSchemaReplication is the replication of a keyspace the operator creates unless
// --cassandra-schema-replication says otherwise: three replicas in every data centre, so that the locks
// survive a lost node (QUORUM of 3). It needs Cassandra 4.0 or later and at least 3 nodes per data
// centre; a one-node development Cassandra needs SimpleStrategy with replication_factor 1.
const DefaultSchemaReplication = "{'class': 'NetworkTopologyStrategy', 'replication_factor': 3}"

// The operator's default client-side limit on its Kubernetes API requests: each DistributedLock's
// reconcile writes its status once when something changed, so a burst of new locks is written at
// this rate (1,000 locks in about 20 s, instead of the 3 min 20 s of client-go's default of 5 per
// second). kube-controller-manager's own defaults are 20 and 30.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)

// Options are the operator's settings, one flag each (see Usage).
type Options struct {
	Kubeconfig  string
	Namespace   string // the operator's namespace: leader-election Lease and webhook Secret
	MetricsAddr string
	// MetricsSecure serves the metrics over TLS to clients the API server authenticates and
	// authorizes (get on the non-resource URL /metrics); false serves them in the clear to anyone.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for the metrics endpoint; empty: a self-signed
	// certificate made at start.
	MetricsCertDir string
	ProbeAddr      string

	LeaderElect      bool
	LeaderElectionID string

	WebhookPort          int
	WebhookCertDir       string
	WebhookCerts         string // CertsSelf or CertsExternal
	WebhookSecret        string
	WebhookService       string
	WebhookConfiguration string
	// WebhookExtraDNSNames are more names for the self-made certificate, for a webhook reached by
	// URL (out-of-cluster development and tests).
	WebhookExtraDNSNames []string

	// Inject is the sidecar configuration (image, resources, default Cassandra connection,
	// Global allow-list). NativeSidecars in it is decided by NativeSidecars below.
	Inject         inject.Config
	NativeSidecars string // NativeAuto, NativeTrue or NativeFalse

	// Operator's own credentials for the default contact points: files from a mounted Secret.
	CassandraUsernameFile, CassandraPasswordFile      string
	CassandraTLSCA, CassandraTLSCert, CassandraTLSKey string

	// CassandraAllowedHosts are the contact points a DistributedLock may name ("*": any); empty
	// means the default contact points only. The operator connects nowhere else.
	CassandraAllowedHosts []string
	// OperatorKeyspaces are the keyspaces where the operator uses its own credentials (on its
	// default contact points) and may create the schema; empty means the default keyspace only.
	OperatorKeyspaces []string
	// AllowAnonymousCassandra accepts DistributedLocks whose connection carries no credentials,
	// for a Cassandra without authentication (development). Dangerous elsewhere: whoever reaches
	// such a Cassandra controls every lock in it.
	AllowAnonymousCassandra bool

	EnsureSchema      bool
	SchemaReplication string
	// AllowSingleReplica accepts a SchemaReplication that keeps one copy of each lock somewhere
	// (a one-node development Cassandra); without it, such a replication is refused.
	AllowSingleReplica bool
	// StatusInterval is the safety refresh of each DistributedLock's status when nothing changed
	// (controllers.DefaultStatusInterval by default); status follows changes through events.
	StatusInterval time.Duration
	// MaxConcurrentReconciles is how many DistributedLocks are reconciled at once.
	MaxConcurrentReconciles int
	// KubeAPIQPS and KubeAPIBurst are the client-side rate limit of the operator's API client
	// (requests per second, and how many may go at once above it); Run sets them on its
	// rest.Config. Without them client-go allows 5 per second (burst 10), which holds 1,000 new
	// DistributedLocks' first status writes up for minutes. They do not bound what the API
	// server's own priority and fairness does.
	KubeAPIQPS   float64
	KubeAPIBurst int
	LogVerbosity int

	// SharedProcess lets more than one operator run in this process (internal/testing/devcluster runs one
	// per control plane, and a test may start two): controller-runtime then does not insist that
	// controller names be unique in the process. No flag sets it.
	SharedProcess bool
}

// serverName is what --cassandra-tls-server-name accepts: the CRD's pattern of
// spec.cassandra.tlsServerName, a DNS name without a port.
var serverName = regexp.MustCompile(`^[a-zA-Z0-9]([-.a-zA-Z0-9]*[a-zA-Z0-9])?$`)

// flagSet declares every flag into o, with its default. Flags whose Options field has a string
// type are bound to that field directly; lists and quantities use the flag.Value types below. The
// returned quantity flags hold the errors ParseOptions reports (see quantityFlag).
func (o *Options) flagSet(getenv func(string) string) (*flag.FlagSet, []*quantityFlag) {
	fs := flag.NewFlagSet("baton-operator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file, outside a cluster (default: in-cluster config or $KUBECONFIG)")
	fs.StringVar(&o.Namespace, "namespace", getenv("POD_NAMESPACE"), "the operator's namespace, for its leader-election Lease and webhook Secret (default $POD_NAMESPACE)")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", `address of the Prometheus metrics endpoint ("0" disables it)`)
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve metrics over TLS, only to clients whose token the API server authenticates and authorizes for get on /metrics (false: plain HTTP to anyone)")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "directory of tls.crt and tls.key for the metrics endpoint (default: a self-signed certificate)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect one replica to run the reconcilers (every replica serves the webhook)")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", "baton-operator.baton.dev", "name of the leader-election Lease")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "port of the admission webhook server")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/var/run/baton/webhook-certs", "directory of the webhook's tls.crt and tls.key: with --webhook-certs=self the operator writes them there from --webhook-secret; with external, mount the Secret there")
	fs.StringVar(&o.WebhookCerts, "webhook-certs", CertsSelf, "who provides the webhook serving certificate: self (the operator creates and rotates it) or external (e.g. cert-manager)")
	fs.StringVar(&o.WebhookSecret, "webhook-secret", "baton-webhook-tls", "Secret in --namespace holding the webhook serving certificate")
	fs.StringVar(&o.WebhookService, "webhook-service", "baton-webhook", "Service in --namespace in front of the webhook (its DNS name is in the certificate)")
	fs.StringVar(&o.WebhookConfiguration, "webhook-configuration", "baton-inject", "MutatingWebhookConfiguration whose caBundle the operator maintains")
	fs.StringVar(&o.Inject.Image, "sidecar-image", "", "sidecar image (required), e.g. ghcr.io/baton-dev/baton:v0.1.0")
	fs.BoolVar(&o.EnsureSchema, "cassandra-ensure-schema", true, "create the lock keyspace and tables when the operator first uses a connection")
	fs.StringVar(&o.SchemaReplication, "cassandra-schema-replication", DefaultSchemaReplication, "CQL replication map of a keyspace the operator creates (the default needs Cassandra >= 4.0 and 3 nodes per data centre; one node for development: {'class': 'SimpleStrategy', 'replication_factor': 1} with --cassandra-allow-single-replica)")
	fs.BoolVar(&o.AllowSingleReplica, "cassandra-allow-single-replica", false, "accept a --cassandra-schema-replication that keeps 1 copy of each lock (replication factor 1, of SimpleStrategy or of a data centre): a lost node stops the locks, a lost disk loses their fencing tokens; only for a one-node development Cassandra")
	fs.BoolVar(&o.AllowAnonymousCassandra, "cassandra-allow-anonymous", false, "accept DistributedLocks that bring no Cassandra credentials and, without its own, connect without any: only for a Cassandra without authentication, in development")
	fs.Var(listFlag{&o.CassandraAllowedHosts}, "cassandra-allowed-hosts", `contact points a DistributedLock's spec.cassandra.contactPoints may name, host[:port],... ("*": any; default: --cassandra-hosts); the operator sends credentials nowhere else`)
	fs.Var(listFlag{&o.OperatorKeyspaces}, "cassandra-operator-keyspaces", "keyspaces where the operator uses its own Cassandra credentials on its default contact points and may create the schema, comma-separated (default: --cassandra-keyspace)")
	fs.DurationVar(&o.StatusInterval, "status-interval", controllers.DefaultStatusInterval, "safety refresh of DistributedLock status when nothing changed (1s to 1h, jittered ±10%): status follows the pods' changes at once; the refresh catches store changes no pod change announces")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", controllers.DefaultMaxConcurrentReconciles, "how many DistributedLocks are reconciled at once, 1-100: a lock whose Cassandra hangs holds up one worker, for at most 1s per connection attempt")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", DefaultKubeAPIQPS, "requests per second the operator's Kubernetes API client sends at most, on average (0.1-10000; client-go alone would allow 5)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", DefaultKubeAPIBurst, "requests the operator's Kubernetes API client may send at once above --kube-api-qps (at least --kube-api-qps, at most 100000)")
	fs.IntVar(&o.LogVerbosity, "log-verbosity", 0, "log verbosity (0: changes and errors; 1: every decision)")
	fs.StringVar(&o.NativeSidecars, "native-sidecars", NativeAuto, "inject native sidecars (Kubernetes >= 1.29): auto (from the server version), true or false")
	fs.Func("sidecar-hint-port", fmt.Sprintf("UDP port on each pod's IP for hand-off hints between sidecars, 1024-65535; 0: off, waiters only poll (default %d)", hintudp.DefaultPort), func(v string) error {
		port, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return fmt.Errorf("want a port number, or 0 for no hints")
		}
		o.Inject.HintPort = int32(port)
		return nil
	})
	o.Inject.HintPort = hintudp.DefaultPort
	fs.Func("sidecar-metrics-port", "TCP port on each pod's IP where sidecars serve their Prometheus metrics, 1024-65535, for a PodMonitor; 0: loopback only, 127.0.0.1:9464 (default 0)", func(v string) error {
		port, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return fmt.Errorf("want a port number, or 0 for metrics on loopback only")
		}
		o.Inject.MetricsPort = int32(port)
		return nil
	})
	fs.DurationVar(&o.Inject.ShutdownTimeout, "sidecar-shutdown-timeout", sidecarcontract.DefaultShutdownTimeout, "how long a sidecar may take to release its locks at shutdown (at most 5m)")
	fs.StringVar(&o.CassandraUsernameFile, "cassandra-username-file", "", "file holding the operator's Cassandra user name for the default contact points")
	fs.StringVar(&o.CassandraPasswordFile, "cassandra-password-file", "", "file holding the operator's Cassandra password")
	fs.StringVar(&o.CassandraTLSCA, "cassandra-tls-ca", "", "PEM CA bundle verifying the default Cassandra servers (turns TLS on)")
	fs.StringVar(&o.CassandraTLSCert, "cassandra-tls-cert", "", "PEM client certificate for the default Cassandra")
	fs.StringVar(&o.CassandraTLSKey, "cassandra-tls-key", "", "PEM client key for the default Cassandra")
	fs.StringVar(&o.Inject.Cassandra.TLSServerName, "cassandra-tls-server-name", "", "name verified in the default Cassandra servers' certificates, by the operator and by the sidecars of locks on the default contact points that name a tlsSecretRef (default: none, each node's IP address is verified, so the certificates need IP SANs; set it when they name DNS names)")
	fs.StringVar(&o.Inject.Cassandra.Keyspace, "cassandra-keyspace", "baton", "default Cassandra keyspace")
	fs.StringVar(&o.Inject.Cassandra.LocalDC, "cassandra-local-dc", "", "default local data centre (required by LOCAL_* consistencies)")
	// Fields of named string types, bound as plain strings; ParseOptions normalises the
	// consistencies and Validate checks them.
	fs.StringVar((*string)(&o.Inject.ImagePullPolicy), "sidecar-image-pull-policy", string(corev1.PullIfNotPresent), "sidecar image pull policy: Always, IfNotPresent or Never")
	fs.StringVar((*string)(&o.Inject.Cassandra.Consistency), "cassandra-consistency", string(batonv1.ConsistencyQuorum), "default consistency: QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL")
	fs.StringVar((*string)(&o.Inject.Cassandra.SerialConsistency), "cassandra-serial-consistency", string(batonv1.SerialConsistencySerial), "default serial consistency: SERIAL or LOCAL_SERIAL")
	fs.Var(listFlag{&o.Inject.Cassandra.ContactPoints}, "cassandra-hosts", "default Cassandra contact points, host[:port],...")
	fs.Var(listFlag{&o.WebhookExtraDNSNames}, "webhook-extra-dns-names", "more DNS names for the self-made webhook certificate, comma-separated (for a webhook reached by URL)")
	fs.Var(listFlag{&o.Inject.GlobalNamespaces}, "global-namespaces", `namespaces allowed to use scope Global, comma-separated ("*": all)`)
	o.Inject.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	req, lim := o.Inject.Resources.Requests, o.Inject.Resources.Limits
	quantities := []*quantityFlag{
		quantityVar(fs, req, corev1.ResourceCPU, "sidecar-cpu-request", "10m", "sidecar CPU request (empty: none)"),
		quantityVar(fs, lim, corev1.ResourceCPU, "sidecar-cpu-limit", "", "sidecar CPU limit (empty: none)"),
		quantityVar(fs, req, corev1.ResourceMemory, "sidecar-memory-request", "32Mi", "sidecar memory request (empty: none)"),
		quantityVar(fs, lim, corev1.ResourceMemory, "sidecar-memory-limit", "64Mi", "sidecar memory limit (empty: none)"),
	}
	for old, name := range oldFlags() {
		fs.Var(fs.Lookup(name).Value, old, "deprecated: use --"+name)
	}
	return fs, quantities
}

// oldFlags maps the names some flags had before they were named after their chart values
// (cassandra.allowAnonymous: --cassandra-allow-anonymous) to their names now. The old names
// still work, as deprecated aliases of the same setting.
func oldFlags() map[string]string {
	return map[string]string{
		"allow-anonymous-cassandra": "cassandra-allow-anonymous",
		"operator-keyspaces":        "cassandra-operator-keyspaces",
		"ensure-schema":             "cassandra-ensure-schema",
		"schema-replication":        "cassandra-schema-replication",
	}
}

// ParseOptions reads the operator's flags; getenv supplies POD_NAMESPACE. It returns flag.ErrHelp
// for -h, and every problem at once otherwise.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	var o Options
	fs, quantities := o.flagSet(getenv)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Options{}, err
		}
		return Options{}, fmt.Errorf("operator: %w (run with -h for the list of flags)", err)
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("operator: unexpected argument %q: every setting is a --flag", fs.Arg(0))
	}
	var errs []error
	for _, q := range quantities {
		errs = append(errs, q.err)
	}
	c := &o.Inject.Cassandra
	c.Consistency = batonv1.Consistency(upperWord(string(c.Consistency)))
	c.SerialConsistency = batonv1.SerialConsistency(upperWord(string(c.SerialConsistency)))
	if len(o.Inject.Resources.Requests) == 0 && len(o.Inject.Resources.Limits) == 0 {
		// Every resource flag set empty on purpose: no requests or limits at all.
		o.Inject.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{}}
	}
	if err := errors.Join(append(errs, o.Validate())...); err != nil {
		return Options{}, err
	}
	return o, nil
}

// injectFlags names the flag that sets each field of Options.Inject that inject.Config's
// validation checks, so that every configuration error names the flag that fixes it.
func injectFlags() map[string]string {
	return map[string]string{
		inject.FieldImage:             "sidecar-image",
		inject.FieldImagePullPolicy:   "sidecar-image-pull-policy",
		inject.FieldShutdownTimeout:   "sidecar-shutdown-timeout",
		inject.FieldContactPoints:     "cassandra-hosts",
		inject.FieldConsistency:       "cassandra-consistency",
		inject.FieldSerialConsistency: "cassandra-serial-consistency",
		inject.FieldHintPort:          "sidecar-hint-port",
		inject.FieldMetricsPort:       "sidecar-metrics-port",
		inject.FieldGlobalNamespaces:  "global-namespaces",
	}
}

// Validate checks o and returns every problem at once, each naming the flag that fixes it.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("operator: "+format, args...)) }
	if err := o.Inject.ValidateFlags(injectFlags()); err != nil {
		bad("%w", err)
	}
	if o.Namespace == "" {
		bad("--namespace is empty and POD_NAMESPACE is not set: give the operator's namespace")
	}
	if o.WebhookPort < 1 || o.WebhookPort > 65535 {
		bad("--webhook-port=%d: want 1 to 65535", o.WebhookPort)
	}
	if o.WebhookCerts != CertsSelf && o.WebhookCerts != CertsExternal {
		bad("--webhook-certs=%q: use self or external", o.WebhookCerts)
	}
	for flagName, v := range map[string]string{"webhook-cert-dir": o.WebhookCertDir, "webhook-secret": o.WebhookSecret,
		"webhook-service": o.WebhookService, "webhook-configuration": o.WebhookConfiguration, "leader-election-id": o.LeaderElectionID} {
		if strings.TrimSpace(v) == "" {
			bad("--%s is empty", flagName)
		}
	}
	switch o.NativeSidecars {
	case NativeAuto, NativeTrue, NativeFalse:
	default:
		bad("--native-sidecars=%q: use auto, true or false", o.NativeSidecars)
	}
	if o.StatusInterval < time.Second || o.StatusInterval > time.Hour {
		bad("--status-interval=%v: use 1s to 1h", o.StatusInterval)
	}
	if o.MaxConcurrentReconciles < 1 || o.MaxConcurrentReconciles > 100 {
		bad("--max-concurrent-reconciles=%d: use 1 to 100", o.MaxConcurrentReconciles)
	}
	if o.KubeAPIQPS < 0.1 || o.KubeAPIQPS > 10000 {
		bad("--kube-api-qps=%g: use 0.1 to 10000 requests per second", o.KubeAPIQPS)
	}
	if o.KubeAPIBurst < 1 || o.KubeAPIBurst > 100000 {
		bad("--kube-api-burst=%d: use 1 to 100000 requests", o.KubeAPIBurst)
	} else if float64(o.KubeAPIBurst) < o.KubeAPIQPS {
		bad("--kube-api-burst=%d is below --kube-api-qps=%g: the burst must hold at least one second's requests", o.KubeAPIBurst, o.KubeAPIQPS)
	}
	if (o.CassandraUsernameFile == "") != (o.CassandraPasswordFile == "") {
		bad("--cassandra-username-file and --cassandra-password-file go together")
	}
	if (o.CassandraTLSCert == "") != (o.CassandraTLSKey == "") {
		bad("--cassandra-tls-cert and --cassandra-tls-key go together")
	}
	if n := o.Inject.Cassandra.TLSServerName; n != "" && !serverName.MatchString(n) {
		bad("--cassandra-tls-server-name=%q: give a DNS name such as cassandra.db.svc", n)
	}
	for _, ks := range o.OperatorKeyspaces {
		if !sidecarcontract.ValidKeyspace(ks) {
			bad("--cassandra-operator-keyspaces: %q is not a keyspace name (a letter, then up to 47 letters, digits or '_')", ks)
		}
	}
	if strings.TrimSpace(o.SchemaReplication) == "" {
		bad("--cassandra-schema-replication is empty: give a CQL replication map such as %s", DefaultSchemaReplication)
	} else if o.EnsureSchema {
		if err := checkSchemaReplication(o.SchemaReplication, o.AllowSingleReplica); err != nil {
			bad("%w", err)
		}
	}
	if o.LogVerbosity < 0 {
		bad("--log-verbosity=%d: want 0 or more", o.LogVerbosity)
	}
	return errors.Join(errs...)
}

// Usage writes the flag list to w.
func Usage(w io.Writer) {
	var o Options
	fs, _ := o.flagSet(os.Getenv)
	fs.SetOutput(w)
	fmt.Fprintln(w, "baton operator: sidecar injection, DistributedLock status and sidecar permissions.\nFlags:")
	fs.PrintDefaults()
}

func upperWord(s string) string { return strings.ToUpper(strings.TrimSpace(s)) }

// listFlag is a comma-separated list flag: blanks around items and empty items are dropped.
type listFlag struct{ items *[]string }

func (f listFlag) String() string {
	if f.items == nil { // the flag package's zero value, for -h
		return ""
	}
	return strings.Join(*f.items, ",")
}

func (f listFlag) Set(s string) error {
	*f.items = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*f.items = append(*f.items, p)
		}
	}
	return nil
}

// quantityFlag is a resource quantity flag that sets (or, when empty, removes) one resource in a
// ResourceList. A value that is not a quantity is kept in err rather than returned by Set, so that
// ParseOptions reports it together with every other problem: the flag package stops at the first
// error of a Set.
type quantityFlag struct {
	name     string // the flag's, for err
	list     corev1.ResourceList
	resource corev1.ResourceName
	text     string
	err      error
}

// quantityVar declares a quantityFlag setting res in list, with its default value.
func quantityVar(fs *flag.FlagSet, list corev1.ResourceList, res corev1.ResourceName, name, value, usage string) *quantityFlag {
	q := &quantityFlag{name: name, list: list, resource: res}
	_ = q.Set(value) // never fails; the defaults are quantities
	fs.Var(q, name, usage)
	return q
}

func (q *quantityFlag) String() string { return q.text }

func (q *quantityFlag) Set(s string) error {
	q.text, q.err = s, nil
	delete(q.list, q.resource)
	v := strings.TrimSpace(s)
	if v == "" {
		return nil
	}
	qty, err := resource.ParseQuantity(v)
	if err != nil {
		q.err = fmt.Errorf("--%s=%q: want a quantity such as 10m or 64Mi", q.name, v)
		return nil
	}
	q.list[q.resource] = qty
	return nil
}
