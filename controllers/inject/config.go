package inject

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/sidecar"
)

// maxShutdownTimeout is the longest preStop wait the sidecar's pre-stop command accepts.
const maxShutdownTimeout = 5 * time.Minute

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
	// overrides it field by field.
	Cassandra CassandraDefaults
	// NativeSidecars says the cluster runs sidecars as init containers with restartPolicy Always
	// (Kubernetes ≥ 1.29). When false, the sidecar is a regular container with a preStop hook, and
	// nothing holds a Blocking-mode app back until the locks are held.
	NativeSidecars bool
	// ShutdownTimeout bounds how long the sidecar may take to release its locks at SIGTERM and,
	// on clusters without native sidecars, how long its preStop hook holds back its shutdown while
	// the app stops. Default 10s, at most 5m. Both together must fit in the pod's
	// terminationGracePeriodSeconds (30s unless the pod says otherwise).
	ShutdownTimeout time.Duration
	// GlobalNamespaces are the namespaces whose DistributedLocks may use scope Global; "*" allows
	// every namespace. Empty: Global is allowed nowhere.
	GlobalNamespaces []string
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

// CassandraDefaults is the operator's default lock store connection.
type CassandraDefaults struct {
	// ContactPoints are "host" or "host:port" entries. A DistributedLock without its own
	// contactPoints cannot be injected when this is empty.
	ContactPoints []string
	// Keyspace holding baton's tables; default "baton".
	Keyspace string
	// LocalDC is the preferred data center; required by LOCAL_QUORUM and LOCAL_SERIAL.
	LocalDC string
	// Consistency of lock reads and commits; default QUORUM.
	Consistency batonv1.Consistency
	// SerialConsistency of the Paxos phase; default SERIAL.
	SerialConsistency batonv1.SerialConsistency
}

// StoreConnection is the lock store connection of one DistributedLock: the operator's defaults
// overridden field by field by spec.cassandra. The sidecar and the operator's status reader both
// connect with it.
type StoreConnection struct {
	CassandraDefaults
	// Credentials and TLS name Secrets in the DistributedLock's namespace, or are nil.
	Credentials *batonv1.CredentialsSecretRef
	TLS         *batonv1.TLSSecretRef
}

// StoreConnection merges dl's spec.cassandra over c's Cassandra defaults (with c's own defaults
// filled in). It does not validate the result; Inject does.
func (c Config) StoreConnection(dl *batonv1.DistributedLock) StoreConnection {
	d := c.withDefaults().Cassandra
	out := StoreConnection{CassandraDefaults: d}
	o := dl.Spec.Cassandra
	if o == nil {
		return out
	}
	if len(o.ContactPoints) > 0 {
		out.ContactPoints = o.ContactPoints
	}
	out.Keyspace = or(o.Keyspace, d.Keyspace)
	out.LocalDC = or(o.LocalDC, d.LocalDC)
	out.Consistency = or(o.Consistency, d.Consistency)
	out.SerialConsistency = or(o.SerialConsistency, d.SerialConsistency)
	out.Credentials, out.TLS = o.CredentialsSecretRef, o.TLSSecretRef
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
		c.ShutdownTimeout = sidecar.DefaultShutdownTimeout
	}
	if c.Cassandra.Keyspace == "" {
		c.Cassandra.Keyspace = "baton"
	}
	if c.Cassandra.Consistency == "" {
		c.Cassandra.Consistency = batonv1.ConsistencyQuorum
	}
	if c.Cassandra.SerialConsistency == "" {
		c.Cassandra.SerialConsistency = batonv1.SerialConsistencySerial
	}
	return c
}

// Validate checks c (with defaults filled in) and returns every problem at once, wrapping
// ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	var p problems
	if strings.TrimSpace(c.Image) == "" {
		p.add("sidecar image is empty: set the operator's sidecar image (--sidecar-image)")
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		p.add("image pull policy %q: use Always, IfNotPresent or Never", c.ImagePullPolicy)
	}
	if c.ShutdownTimeout < 0 || c.ShutdownTimeout > maxShutdownTimeout {
		p.add("shutdown timeout %v: use a positive duration up to %v", c.ShutdownTimeout, maxShutdownTimeout)
	}
	for _, h := range c.Cassandra.ContactPoints {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, ", \t\n") {
			p.add("Cassandra contact point %q: give a host or host:port without commas or spaces", h)
		}
	}
	if !validConsistency(c.Cassandra.Consistency) {
		p.add("Cassandra consistency %q: use QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL", c.Cassandra.Consistency)
	}
	if !validSerial(c.Cassandra.SerialConsistency) {
		p.add("Cassandra serial consistency %q: use SERIAL or LOCAL_SERIAL", c.Cassandra.SerialConsistency)
	}
	for _, ns := range c.GlobalNamespaces {
		if ns != "*" && !dns1123Label.MatchString(ns) {
			p.add("global namespace %q is not a namespace name (or \"*\" for all)", ns)
		}
	}
	return p.err(func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, msg) })
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func validConsistency(c batonv1.Consistency) bool {
	switch c {
	case batonv1.ConsistencyQuorum, batonv1.ConsistencyLocalQuorum, batonv1.ConsistencyEachQuorum, batonv1.ConsistencyAll:
		return true
	}
	return false
}

func validSerial(s batonv1.SerialConsistency) bool {
	return s == batonv1.SerialConsistencySerial || s == batonv1.SerialConsistencyLocalSerial
}
