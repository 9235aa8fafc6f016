package inject

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
)

// Config holds the operator's defaults for every injected sidecar. The zero value of each field
// other than Image means its default; call Validate when the operator starts, so a bad setting is
// found before the first pod is admitted.
type Config struct {
	// Image is the sidecar image, e.g. "ghcr.io/baton-dev/baton:v1.2.3". Required. It is also
	// written to the pod's baton.dev/injected annotation.
	Image string
	// ImagePullPolicy of the sidecar; default IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// Resources of the sidecar container; when it sets neither requests nor limits,
	// DefaultResources is used.
	Resources corev1.ResourceRequirements
	// Cassandra is the lock store connection a DistributedLock uses unless its spec.cassandra
	// overrides it field by field: contact points, keyspace (default "baton"), local data centre,
	// consistency (default QUORUM), serial consistency (default SERIAL) and the TLS server name
	// (public: it reaches the sidecars of locks that keep these contact points and turn TLS on
	// with their own tlsSecretRef). It names no Secrets: the operator's own credentials never
	// reach the pods.
	Cassandra batonv1.CassandraConnection
	// NativeSidecars says the cluster runs sidecars as init containers with restartPolicy Always
	// (Kubernetes ≥ 1.29). When false, the sidecar is a regular container with a preStop hook, and
	// nothing holds a Blocking-mode app back until the locks are held.
	NativeSidecars bool
	// ShutdownTimeout bounds how long the sidecar may take to release its locks at SIGTERM and,
	// on clusters without native sidecars, how long its preStop hook holds back its shutdown while
	// the app stops. Default 10s (sidecarcontract.DefaultShutdownTimeout), at most 5m
	// (sidecarcontract.MaxShutdownTimeout). Both together must fit in the pod's
	// terminationGracePeriodSeconds (30s unless the pod says otherwise).
	ShutdownTimeout time.Duration
	// GlobalNamespaces are the namespaces whose DistributedLocks may use scope Global; "*" allows
	// every namespace. Empty: Global is allowed nowhere.
	GlobalNamespaces []string
	// HintPort is the UDP port, on each pod's IP, where sidecars receive hand-off hints from the
	// sidecars of other pods (package hintudp); 1024 to 65535. Unlike the other fields, 0 means
	// off: waiters then only poll. The operator's flag --sidecar-hint-port defaults to
	// hintudp.DefaultPort (9465).
	HintPort int32
	// MetricsPort is the TCP port on which each sidecar serves its Prometheus metrics on the pod's
	// network, for a PodMonitor (charts/baton, monitoring.podMonitor); 1024 to 65535, and not
	// the hint port. 0 (the default) keeps them on loopback (127.0.0.1:9464), where only the pod
	// itself reaches them. The operator's flag --sidecar-metrics-port.
	MetricsPort int32
}

// GlobalAllowed reports whether DistributedLocks in namespace may use scope Global.
func (c Config) GlobalAllowed(namespace string) bool {
	for _, ns := range c.GlobalNamespaces {
		if ns == "*" || ns == namespace {
			return true
		}
	}
	return false
}

// globalScopeProblem explains why a Global DistributedLock in namespace is refused, or returns "".
func (c Config) globalScopeProblem(namespace string) string {
	if c.GlobalAllowed(namespace) {
		return ""
	}
	allowed := "no namespace"
	if len(c.GlobalNamespaces) > 0 {
		allowed = "only namespaces " + strings.Join(c.GlobalNamespaces, ", ")
	}
	return fmt.Sprintf("spec.scope Global is not allowed in namespace %q: the operator allows it in %s (operator flag --global-namespaces); use scope Namespace or ask the cluster admin", namespace, allowed)
}

// StoreConnection returns the lock store connection of dl: spec.cassandra merged field by field
// over c's Cassandra defaults (with c's own defaults filled in), except that c's TLS server name
// applies only while dl keeps c's contact points. Its Secret references are dl's alone, in dl's
// namespace: c names none. It does not validate the result; Inject does.
func (c Config) StoreConnection(dl *batonv1.DistributedLock) batonv1.CassandraConnection {
	out := c.withDefaults().Cassandra
	o := dl.Spec.Cassandra
	if o == nil {
		return out
	}
	if len(o.ContactPoints) > 0 {
		out.ContactPoints = o.ContactPoints
	}
	out.Keyspace = cmp.Or(o.Keyspace, out.Keyspace)
	out.LocalDC = cmp.Or(o.LocalDC, out.LocalDC)
	out.Consistency = cmp.Or(o.Consistency, out.Consistency)
	out.SerialConsistency = cmp.Or(o.SerialConsistency, out.SerialConsistency)
	if len(o.ContactPoints) > 0 && !OnOperatorServers(o.ContactPoints, c.Cassandra.ContactPoints) {
		// The operator's server name is its servers'; other contact points are other servers.
		out.TLSServerName = ""
	}
	out.TLSServerName = cmp.Or(o.TLSServerName, out.TLSServerName)
	out.CredentialsSecretRef, out.TLSSecretRef = o.CredentialsSecretRef, o.TLSSecretRef
	return out
}

// DefaultResources is what the sidecar asks for when Config.Resources is empty: it is sized for
// the sidecar's ~20 MiB soft memory limit (cmd/sidecar) with headroom.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
	}
}

// withDefaults returns c with every unset field at its default.
func (c Config) withDefaults() Config {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.Resources.Requests == nil && c.Resources.Limits == nil {
		c.Resources = DefaultResources()
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = sidecarcontract.DefaultShutdownTimeout
	}
	// The sidecar's own defaults, so that an injected sidecar runs as one started by hand.
	c.Cassandra.Keyspace = cmp.Or(c.Cassandra.Keyspace, sidecarcontract.Keyspace.Default())
	c.Cassandra.Consistency = cmp.Or(c.Cassandra.Consistency, batonv1.Consistency(sidecarcontract.Consistency.Default()))
	c.Cassandra.SerialConsistency = cmp.Or(c.Cassandra.SerialConsistency, batonv1.SerialConsistency(sidecarcontract.SerialConsistency.Default()))
	return c
}

// Validate checks c (with defaults filled in) and returns every problem at once, wrapping
// ErrInvalidConfig. Each problem names its setting in words ("hint port 80: ...").
func (c Config) Validate() error { return c.ValidateFlags(nil) }

// The fields of Config that ValidateFlags can name by a flag: the keys of its argument.
const (
	FieldImage             = "Image"
	FieldImagePullPolicy   = "ImagePullPolicy"
	FieldShutdownTimeout   = "ShutdownTimeout"
	FieldContactPoints     = "Cassandra.ContactPoints"
	FieldConsistency       = "Cassandra.Consistency"
	FieldSerialConsistency = "Cassandra.SerialConsistency"
	FieldHintPort          = "HintPort"
	FieldMetricsPort       = "MetricsPort"
	FieldGlobalNamespaces  = "GlobalNamespaces"
)

// ValidateFlags is Validate for a Config read from flags: a problem with a field that flags names
// (flags[FieldHintPort] = "sidecar-hint-port") names that flag instead of the field's words
// ("--sidecar-hint-port=80: ..."). It does not check that the flags exist.
func (c Config) ValidateFlags(flags map[string]string) error {
	c = c.withDefaults()
	var p problems
	// one says what is wrong with field, whose value is v: "--flag=v" or "words v".
	one := func(field, words string, v any) string {
		if f, ok := flags[field]; ok {
			return fmt.Sprintf("--%s=%v", f, v)
		}
		return fmt.Sprintf("%s %v", words, v)
	}
	// item says what is wrong with one item v of the list field: "--flag: v" or "words v".
	item := func(field, words string, v any) string {
		if f, ok := flags[field]; ok {
			return fmt.Sprintf("--%s: %v", f, v)
		}
		return fmt.Sprintf("%s %v", words, v)
	}
	if strings.TrimSpace(c.Image) == "" {
		if f, ok := flags[FieldImage]; ok {
			p.add("--%s is empty: give the sidecar image, e.g. ghcr.io/baton-dev/baton:v0.1.0", f)
		} else {
			p.add("sidecar image is empty: set the operator's sidecar image (--sidecar-image)")
		}
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		p.add("%s: use Always, IfNotPresent or Never", one(FieldImagePullPolicy, "image pull policy", fmt.Sprintf("%q", c.ImagePullPolicy)))
	}
	if c.ShutdownTimeout < 0 || c.ShutdownTimeout > sidecarcontract.MaxShutdownTimeout {
		p.add("%s: use a positive duration up to %v", one(FieldShutdownTimeout, "shutdown timeout", c.ShutdownTimeout), sidecarcontract.MaxShutdownTimeout)
	}
	for _, h := range c.Cassandra.ContactPoints {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, ", \t\n") {
			p.add("%s: give a host or host:port without commas or spaces", item(FieldContactPoints, "Cassandra contact point", fmt.Sprintf("%q", h)))
		}
	}
	if !sidecarcontract.ValidConsistency(c.Cassandra.Consistency) {
		p.add("%s: use %s", one(FieldConsistency, "Cassandra consistency", fmt.Sprintf("%q", c.Cassandra.Consistency)), sidecarcontract.ConsistencyChoices())
	}
	if !sidecarcontract.ValidSerialConsistency(c.Cassandra.SerialConsistency) {
		p.add("%s: use %s", one(FieldSerialConsistency, "Cassandra serial consistency", fmt.Sprintf("%q", c.Cassandra.SerialConsistency)), sidecarcontract.SerialConsistencyChoices())
	}
	if c.Cassandra.CredentialsSecretRef != nil || c.Cassandra.TLSSecretRef != nil {
		p.add("the default Cassandra connection names Secrets: the operator's own credentials come from its files, and a DistributedLock names its own Secrets in spec.cassandra")
	}
	if c.HintPort != 0 && (c.HintPort < 1024 || c.HintPort > 65535) {
		p.add("%s: use 1024 to 65535 (the sidecar runs without privileges), or 0 for no hand-off hints", one(FieldHintPort, "hint port", c.HintPort))
	}
	if c.MetricsPort != 0 && (c.MetricsPort < 1024 || c.MetricsPort > 65535) {
		p.add("%s: use 1024 to 65535 (the sidecar runs without privileges), or 0 for metrics on loopback only", one(FieldMetricsPort, "metrics port", c.MetricsPort))
	}
	for _, ns := range c.GlobalNamespaces {
		if ns != "*" && !dns1123Label.MatchString(ns) {
			p.add("%s is not a namespace name (or \"*\" for all)", item(FieldGlobalNamespaces, "global namespace", fmt.Sprintf("%q", ns)))
		}
	}
	return p.err(func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, msg) })
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// contactPoints adds a problem for each contact point that cannot be passed on in the sidecar's
// comma-separated BATON_CASSANDRA_HOSTS.
func (p *problems) contactPoints(hosts []string) {
	for _, h := range hosts {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, ", \t\n") {
			p.add("Cassandra contact point %q: give a host or host:port without commas or spaces", h)
		}
	}
}

// consistencies adds a problem for a consistency level a lock cannot use.
func (p *problems) consistencies(c batonv1.Consistency, s batonv1.SerialConsistency) {
	if !sidecarcontract.ValidConsistency(c) {
		p.add("Cassandra consistency %q: use %s", c, sidecarcontract.ConsistencyChoices())
	}
	if !sidecarcontract.ValidSerialConsistency(s) {
		p.add("Cassandra serial consistency %q: use %s", s, sidecarcontract.SerialConsistencyChoices())
	}
}
