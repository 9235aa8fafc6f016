package inject

import (
	"fmt"
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
		p.add("sidecar image is empty: set the operator's sidecar image")
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
	return p.err(func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, msg) })
}

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
