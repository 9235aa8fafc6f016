package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits and defaults of a DistributedLock. The CRD enforces them through the markers below (which
// cannot refer to these constants); a test checks that the two agree, and that they agree with the
// sidecar and the lock package.
const (
	// MaxLockIDs is the most lock IDs one DistributedLock may declare.
	MaxLockIDs = 16
	// MaxLockIDLength is the longest lock ID, in characters.
	MaxLockIDLength = 63
	// LockIDPattern is what a lock ID may look like: letters, digits, '.', '_' and '-', beginning
	// and ending with a letter or digit. It is the rule the sidecar enforces.
	LockIDPattern = `^[a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?$`
	// KeyspacePattern is what a Cassandra keyspace of baton may be called: a letter, then up to 47
	// letters, digits or '_' (Cassandra's own limit is 48 characters). The operator's flags, the
	// injection policy and the CRD's pattern on spec.cassandra.keyspace follow it (a test checks).
	KeyspacePattern = `^[a-zA-Z][a-zA-Z0-9_]{0,47}$`
	// DefaultLeaseDuration is the lease when spec.leaseDuration is not set.
	DefaultLeaseDuration = "15s"
	// MinLeaseDuration and MaxLeaseDuration bound spec.leaseDuration.
	MinLeaseDuration = "1s"
	MaxLeaseDuration = "1h"
	// MinYieldWhenUnready and MaxYieldWhenUnready bound spec.yieldWhenUnready.
	MinYieldWhenUnready = "1s"
	MaxYieldWhenUnready = "1h"
)

// LockMode says when a pod's sidecar acquires its locks.
// +kubebuilder:validation:Enum=Blocking;Try
type LockMode string

const (
	// ModeBlocking: the sidecar acquires every lock at start and holds it for the pod's life; a
	// startup probe keeps the app from starting before the locks are held.
	ModeBlocking LockMode = "Blocking"
	// ModeTry: the sidecar acquires a lock only when the app asks, and the ask returns at once
	// with held or not held.
	ModeTry LockMode = "Try"
)

// TrafficPolicy says how Service traffic follows the lock holder.
// +kubebuilder:validation:Enum=ReadinessGate;Label;None
type TrafficPolicy string

const (
	// TrafficReadinessGate: the pod gets the readiness gate baton.dev/lock-held, which the
	// sidecar sets true only while it holds the locks, so only the holder is Ready and receives
	// Service traffic. Standbys stay NotReady, which can stall Deployment rollouts (see the
	// RolloutSafe condition).
	TrafficReadinessGate TrafficPolicy = "ReadinessGate"
	// TrafficLabel: the sidecar labels its pod baton.dev/role=holder or standby; select
	// baton.dev/role=holder in the Service. Pods stay Ready, so rollouts never stall.
	TrafficLabel TrafficPolicy = "Label"
	// TrafficNone: the lock does not affect readiness or labels.
	TrafficNone TrafficPolicy = "None"
)

// HandoffPolicy says which waiter a lock goes to next.
// +kubebuilder:validation:Enum=QueueOrder;NewestRevision
type HandoffPolicy string

const (
	// HandoffQueueOrder: the waiter that queued first (the default).
	HandoffQueueOrder HandoffPolicy = "QueueOrder"
	// HandoffNewestRevision: during a rollout, pods of the workload's newest revision come first.
	// Once one of them waits for the lock, the operator marks the pods of older revisions
	// superseded (annotation baton.dev/superseded): their sidecars give up what they hold and
	// leave the queue, so the lock moves once, straight to the new revision, by a release rather
	// than by the old holder's termination.
	HandoffNewestRevision HandoffPolicy = "NewestRevision"
)

// AnnotationSuperseded is set by the operator on a pod of an older revision than its workload's
// newest while a pod of the newest revision waits for the lock (spec.handoff NewestRevision); the
// value says which. Its sidecar gives up its locks and takes none while the annotation is there.
const AnnotationSuperseded = "baton.dev/superseded"

// LockScope says who shares a lock ID.
// +kubebuilder:validation:Enum=Namespace;Global
type LockScope string

const (
	// ScopeNamespace: a lock ID is shared only by pods in the DistributedLock's namespace; it is
	// stored as <namespace>/<lockId>.
	ScopeNamespace LockScope = "Namespace"
	// ScopeGlobal: a lock ID is shared by every namespace and cluster that uses the same
	// keyspace. The operator allows it only in namespaces on its allow-list.
	ScopeGlobal LockScope = "Global"
)

// Consistency is the Cassandra consistency level of the commit phase of lock writes and of reads.
// +kubebuilder:validation:Enum=QUORUM;LOCAL_QUORUM;EACH_QUORUM;ALL
type Consistency string

// The consistency levels a DistributedLock may ask for. Weaker levels (ONE, LOCAL_ONE, ...) cannot
// keep lock reads in line with LWT writes and are not offered.
const (
	ConsistencyQuorum      Consistency = "QUORUM"
	ConsistencyLocalQuorum Consistency = "LOCAL_QUORUM"
	ConsistencyEachQuorum  Consistency = "EACH_QUORUM"
	ConsistencyAll         Consistency = "ALL"
)

// SerialConsistency is the Cassandra consistency level of the Paxos phase of lightweight
// transactions.
// +kubebuilder:validation:Enum=SERIAL;LOCAL_SERIAL
type SerialConsistency string

// The serial consistency levels. LOCAL_SERIAL makes a lock local to one data center.
const (
	SerialConsistencySerial      SerialConsistency = "SERIAL"
	SerialConsistencyLocalSerial SerialConsistency = "LOCAL_SERIAL"
)

// LabelCassandraSecret, set to "true" on a Secret, lets the operator use that Secret when a
// DistributedLock of its namespace names it in spec.cassandra.credentialsSecretRef or
// tlsSecretRef. The operator ignores a Secret without it: whoever may create a DistributedLock
// must not thereby make the operator read, and send to Cassandra, any Secret of the namespace.
const LabelCassandraSecret = "baton.dev/cassandra-secret"

// AnnotationRevoke on a DistributedLock asks the operator to revoke grants. Its value is a
// comma-separated list of entries, each "<lockId>=<token>" (revoke exactly the grant with that
// fencing token) or a bare "<lockId>" (the grant current when the operator reads it). The operator
// first binds every bare entry to the current holder's token by rewriting the annotation (so a
// revocation can never move on to the next, innocent holder), then revokes only bound entries:
// each by a conditional write that applies only while that token is the current grant. It
// records each revocation in status.locks[].lastRevocation and an Event, reports an entry whose
// grant already ended as gone, and removes the entries it dealt with. The revoked holder stops
// claiming the lock at its next renewal; the next waiter is granted one lease later.
const AnnotationRevoke = "baton.dev/revoke"

// Condition types in DistributedLockStatus.Conditions.
const (
	// ConditionReady is True when the operator could read every lock of the DistributedLock from
	// the store and the status reflects it; False with a reason otherwise.
	ConditionReady = "Ready"
	// ConditionStoreReachable is True when the operator reached the Cassandra lock store with
	// this DistributedLock's connection settings at the last reconcile.
	ConditionStoreReachable = "StoreReachable"
	// ConditionRolloutSafe is False when a workload using this lock would stall its rollout
	// because its standbys are never Ready (ReadinessGate, or an app held back in mode Blocking)
	// and, for example, a Deployment's maxUnavailable cannot absorb them; the message names the
	// setting that fixes it.
	ConditionRolloutSafe = "RolloutSafe"
)

// DistributedLockSpec declares the locks a workload's pods hold and how they behave. Pods opt in
// with the annotation baton.dev/lock: <name of this DistributedLock>.
//
// The fields that choose where a lock lives in the store (scope, cassandra.keyspace and
// cassandra.serialConsistency) cannot change, nor be set or unset, once the DistributedLock exists:
// pods started before and after such an edit would use two different owner records (or two Paxos
// domains) and could both hold "the" lock. Contact points may change (nodes get replaced); the
// operator and the sidecars then refuse a Cassandra cluster other than the one the lock lives on
// (status.cassandraClusterName).
//
// +kubebuilder:validation:XValidation:rule="(has(self.scope) ? self.scope : 'Namespace') == (has(oldSelf.scope) ? oldSelf.scope : 'Namespace')",message="spec.scope is immutable: it chooses which owner record holds the lock, and pods using the old and the new value would hold two different locks; create a new DistributedLock instead"
// +kubebuilder:validation:XValidation:rule="has(self.cassandra) && has(self.cassandra.keyspace) ? (has(oldSelf.cassandra) && has(oldSelf.cassandra.keyspace) && self.cassandra.keyspace == oldSelf.cassandra.keyspace) : !(has(oldSelf.cassandra) && has(oldSelf.cassandra.keyspace))",message="spec.cassandra.keyspace cannot be changed, set or unset: it chooses where the lock lives, and pods using the old and the new keyspace would hold two different locks; create a new DistributedLock instead"
// +kubebuilder:validation:XValidation:rule="has(self.cassandra) && has(self.cassandra.serialConsistency) ? (has(oldSelf.cassandra) && has(oldSelf.cassandra.serialConsistency) && self.cassandra.serialConsistency == oldSelf.cassandra.serialConsistency) : !(has(oldSelf.cassandra) && has(oldSelf.cassandra.serialConsistency))",message="spec.cassandra.serialConsistency cannot be changed, set or unset: SERIAL and LOCAL_SERIAL are different Paxos domains over the same lock, and pods using both could hold it at once; create a new DistributedLock instead"
// +kubebuilder:validation:XValidation:rule="!(has(self.scope) && self.scope == 'Global' && has(self.cassandra) && has(self.cassandra.serialConsistency) && self.cassandra.serialConsistency == 'LOCAL_SERIAL')",message="serialConsistency LOCAL_SERIAL cannot be used with scope Global: a Global lock is shared across data centers and clusters, and LOCAL_SERIAL makes it exclusive only within one data center; use SERIAL"
type DistributedLockSpec struct {
	// lockIds are the IDs of the locks every pod using this DistributedLock holds, acquired in
	// this order. 1 to 16 IDs, no repeats; each is 1 to 63 letters, digits, '.', '_' or '-',
	// beginning and ending with a letter or digit.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="lockIds must not repeat an ID"
	LockIDs []string `json:"lockIds"`

	// mode says when the sidecar acquires the locks: Blocking acquires them at pod start and
	// holds them, keeping the app from starting until they are held; Try acquires a lock only
	// when the app asks, and returns at once if it is taken. Unset, the mode is Blocking, but
	// pods of Deployments, StatefulSets and DaemonSets whose traffic policy is Label start their
	// app at once (so that every pod is Ready and rollouts complete) while the sidecar queues.
	// +optional
	Mode LockMode `json:"mode,omitempty"`

	// leaseDuration is how long a grant lasts without renewal: the sidecar renews well before it
	// ends and stops claiming the lock before it can end, and a crashed holder's lock passes on
	// about one lease after its last renewal. A Go duration between 1s and 1h; default 15s.
	// +optional
	// +kubebuilder:default="15s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="leaseDuration must be a duration such as 15s, 1m30s or 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))",message="leaseDuration must be between 1s and 1h"
	LeaseDuration *metav1.Duration `json:"leaseDuration,omitempty"`

	// trafficPolicy says how Service traffic follows the holder: ReadinessGate makes only the
	// holder Ready; Label labels pods baton.dev/role=holder|standby for a Service selector and
	// leaves them Ready; None changes neither. Unset, it depends on the pod's workload: Label for
	// pods of Deployments, StatefulSets and DaemonSets, None for pods of Jobs and CronJobs,
	// ReadinessGate for other pods.
	// +optional
	TrafficPolicy TrafficPolicy `json:"trafficPolicy,omitempty"`

	// scope says who shares the lock IDs: Namespace (the default) only pods in this namespace;
	// Global every namespace and cluster using the same keyspace, allowed only in namespaces on
	// the operator's allow-list.
	// +optional
	// +kubebuilder:default=Namespace
	Scope LockScope `json:"scope,omitempty"`

	// yieldWhenUnready binds the locks to the app's health. When set, a pod's sidecar gives up
	// the locks it holds once the pod's app containers (every container but the sidecar) have
	// not all been ready for this long, counted from the grant or from the last time they were
	// all ready, whichever is later; it then takes no lock again, and asks for none (Blocking
	// mode) or refuses the app's requests (Try mode), until they are all ready again. Readiness
	// is the kubelet's: the containers' ready flags in the pod's status, which the sidecar reads
	// from the API server. While the API server cannot be reached the sidecar keeps what it
	// holds. A Go duration between 1s and 1h; unset (the default) turns this off. Choose it
	// longer than the app takes to become ready after it is granted the lock.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="yieldWhenUnready must be a duration such as 30s or 2m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))",message="yieldWhenUnready must be between 1s and 1h"
	YieldWhenUnready *metav1.Duration `json:"yieldWhenUnready,omitempty"`

	// handoff says which waiter the lock goes to next: QueueOrder (the default) the first to
	// queue; NewestRevision, during a rollout of the Deployment or StatefulSet the pods belong
	// to, a pod of its newest revision: once one waits, the pods of older revisions give up the
	// lock and leave the queue, so the lock moves once per rollout, by a release.
	// +optional
	Handoff HandoffPolicy `json:"handoff,omitempty"`

	// cassandra is this lock's Cassandra connection, made by its sidecars and, to report status,
	// by the operator. contactPoints, keyspace, localDC, consistency and serialConsistency left out
	// keep the operator's defaults; tlsServerName left out keeps the operator's only while the
	// contact points are the operator's. Credentials never come from the operator: without
	// credentialsSecretRef (or a client certificate in tlsSecretRef) the sidecars connect without
	// a login, which the operator and its webhook refuse unless it runs with
	// --cassandra-allow-anonymous. TLS is on only with tlsSecretRef.
	// +optional
	Cassandra *CassandraConnection `json:"cassandra,omitempty"`
}

// CassandraConnection is a lock's Cassandra connection. Every field is optional. The connection
// settings fall back to the operator's defaults; the Secrets do not: the operator's own
// credentials and TLS material never reach a sidecar. The CRD does not check that Secrets exist or
// that hosts resolve; the StoreReachable condition reports that.
// +kubebuilder:validation:XValidation:rule="!has(self.consistency) || self.consistency != 'LOCAL_QUORUM' || has(self.localDC)",message="consistency LOCAL_QUORUM needs cassandra.localDC"
// +kubebuilder:validation:XValidation:rule="!has(self.serialConsistency) || self.serialConsistency != 'LOCAL_SERIAL' || has(self.localDC)",message="serialConsistency LOCAL_SERIAL needs cassandra.localDC"
// +kubebuilder:validation:XValidation:rule="!has(self.tlsServerName) || has(self.tlsSecretRef)",message="cassandra.tlsServerName needs cassandra.tlsSecretRef: TLS is on only with it, and without TLS no server name is verified"
type CassandraConnection struct {
	// contactPoints are Cassandra hosts to connect to first, each "host" or "host:port" (port
	// 9042 when left out). At most 16. The operator connects only to contact points on its
	// allow-list (by default its own, --cassandra-hosts).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=261
	ContactPoints []string `json:"contactPoints,omitempty"`

	// keyspace holds the lock tables: a letter, then up to 47 letters, digits or '_'. The
	// operator's default is "baton". Pods that should share a lock must use the same keyspace.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`
	Keyspace string `json:"keyspace,omitempty"`

	// localDC is the Cassandra data center the sidecar prefers; required by LOCAL_QUORUM and
	// LOCAL_SERIAL.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	LocalDC string `json:"localDC,omitempty"`

	// consistency is the consistency level of lock reads and of the commit of lock writes: QUORUM,
	// LOCAL_QUORUM (needs localDC), EACH_QUORUM or ALL.
	// +optional
	Consistency Consistency `json:"consistency,omitempty"`

	// serialConsistency is the consistency level of the Paxos phase of lock writes: SERIAL, or
	// LOCAL_SERIAL (needs localDC; the lock is then only exclusive within that data center).
	// +optional
	SerialConsistency SerialConsistency `json:"serialConsistency,omitempty"`

	// credentialsSecretRef names a Secret in the DistributedLock's namespace holding the Cassandra
	// username and password that the sidecars (and the operator, for this lock's status) log in
	// with. The operator and its webhook use it only if it carries the label
	// baton.dev/cassandra-secret=true. Without it, and without a client certificate in
	// tlsSecretRef, the lock is refused (StoreReachable False, reason ConnectionNotAllowed) and its
	// pods are not admitted, unless the operator runs with --cassandra-allow-anonymous.
	// +optional
	CredentialsSecretRef *CredentialsSecretRef `json:"credentialsSecretRef,omitempty"`

	// tlsSecretRef names a Secret in the DistributedLock's namespace holding the CA that signs the
	// Cassandra server certificates and, for mutual TLS, a client certificate and key. TLS is on
	// when it is set. The operator uses it only if it carries the label
	// baton.dev/cassandra-secret=true.
	// +optional
	TLSSecretRef *TLSSecretRef `json:"tlsSecretRef,omitempty"`

	// tlsServerName is the name the sidecars and the operator verify in the Cassandra servers'
	// certificates (e.g. cassandra.db.svc when every node's certificate names it). Used only with
	// tlsSecretRef. Left out: the operator's default (--cassandra-tls-server-name, chart
	// cassandra.tls.serverName) on the operator's contact points, otherwise none: then each node's
	// IP address is verified (the driver resolves contact points to IPs and dials those), so the
	// certificates need IP SANs. Set it when they name DNS names.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-.a-zA-Z0-9]*[a-zA-Z0-9])?$`
	TLSServerName string `json:"tlsServerName,omitempty"`
}

// CredentialsSecretRef names a Secret and the keys in it that hold Cassandra credentials.
type CredentialsSecretRef struct {
	// name of the Secret, in the DistributedLock's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// usernameKey is the key holding the username; default "username".
	// +optional
	// +kubebuilder:default=username
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	UsernameKey string `json:"usernameKey,omitempty"`

	// passwordKey is the key holding the password; default "password".
	// +optional
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	PasswordKey string `json:"passwordKey,omitempty"`
}

// TLSSecretRef names a Secret and the keys in it that hold TLS material for Cassandra. A client
// certificate is used only when the Secret holds both certKey and keyKey.
type TLSSecretRef struct {
	// name of the Secret, in the DistributedLock's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// caKey is the key holding the PEM CA bundle that verifies the servers; default "ca.crt".
	// +optional
	// +kubebuilder:default="ca.crt"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	CAKey string `json:"caKey,omitempty"`

	// certKey is the key holding the PEM client certificate; default "tls.crt".
	// +optional
	// +kubebuilder:default="tls.crt"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	CertKey string `json:"certKey,omitempty"`

	// keyKey is the key holding the PEM client private key; default "tls.key".
	// +optional
	// +kubebuilder:default="tls.key"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	KeyKey string `json:"keyKey,omitempty"`
}

// LockStatus is what the lock store said about one lock ID at the last reconcile. It is a
// snapshot: the holder may have changed since, and only the fencing token, checked by the
// protected resource, is authoritative.
type LockStatus struct {
	// lockId is the lock ID from spec.lockIds.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	LockID string `json:"lockId"`

	// holder is the name of the pod holding the lock; empty when nobody holds it.
	// +optional
	Holder string `json:"holder,omitempty"`

	// holderNamespace is the namespace of the holder pod; with scope Global it may differ from the
	// DistributedLock's namespace, or name a pod in another cluster.
	// +optional
	HolderNamespace string `json:"holderNamespace,omitempty"`

	// token is the fencing token of the current (or, when nobody holds the lock, the last) grant.
	// It grows with every grant and never resets; 0 means the lock was never granted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Token int64 `json:"token,omitempty"`

	// acquiredTime is when the current holder was granted the lock, as seen by the operator.
	// +optional
	AcquiredTime *metav1.Time `json:"acquiredTime,omitempty"`

	// waiting is the number of contenders queued for the lock, not counting the holder.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Waiting int32 `json:"waiting"`

	// revoked is true while the current grant is revoked and not yet replaced: the holder has
	// stopped (or is about to stop) claiming the lock, and the next waiter is granted one lease
	// after the revocation.
	// +optional
	Revoked bool `json:"revoked,omitempty"`

	// lastRevocation records the last grant of this lock that the operator revoked because the
	// DistributedLock was annotated baton.dev/revoke: <lockId>=<token> (or a bare <lockId>).
	// +optional
	LastRevocation *Revocation `json:"lastRevocation,omitempty"`

	// transitions counts the holder changes the operator has observed since it started tracking
	// this lock. It may miss changes that happened between two reconciles.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Transitions int64 `json:"transitions,omitempty"`
}

// Revocation is a grant the operator revoked.
type Revocation struct {
	// token is the fencing token of the revoked grant.
	// +required
	// +kubebuilder:validation:Minimum=1
	Token int64 `json:"token"`

	// holder is the pod (namespace/name) that held the revoked grant.
	// +optional
	Holder string `json:"holder,omitempty"`

	// time is when the operator revoked the grant.
	// +required
	Time metav1.Time `json:"time"`
}

// DistributedLockStatus is the state the operator last observed. Nothing reads it to make a
// locking decision; it is for people and tools.
type DistributedLockStatus struct {
	// observedGeneration is the metadata.generation of the spec this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// cassandraClusterName is the cluster_name of the Cassandra cluster this lock lives on. The
	// operator records it at its first successful read of the lock store and never changes it; it
	// then refuses to read or revoke on another cluster (StoreReachable False, reason
	// ClusterMismatch), and the webhook passes it to every new sidecar, which refuses another
	// cluster at start. To move a lock to another cluster, create a new DistributedLock.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	CassandraClusterName string `json:"cassandraClusterName,omitempty"`

	// lockIdsText is spec.lockIds joined by commas ("orders,billing"), as of observedGeneration,
	// for the LOCKS column of kubectl get: the API server prints a list column as a JSON array.
	// The operator writes it with the rest of the status; it is empty until its first reconcile.
	// +optional
	// +kubebuilder:validation:MaxLength=1023
	LockIDsText string `json:"lockIdsText,omitempty"`

	// locks holds one entry per lock ID in spec.lockIds.
	// +optional
	// +listType=map
	// +listMapKey=lockId
	// +kubebuilder:validation:MaxItems=16
	Locks []LockStatus `json:"locks,omitempty"`

	// conditions are Ready, StoreReachable and RolloutSafe (see the Condition* constants).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// DistributedLock declares a set of Cassandra-backed locks that the pods annotated with
// baton.dev/lock: <name> hold through the baton sidecar, and reports who holds them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=dlock,categories=baton
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Whether status.locks reflects the lock store"
// +kubebuilder:printcolumn:name="Locks",type=string,JSONPath=`.status.lockIdsText`,description="Lock IDs, comma-separated (written by the operator)"
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.locks[0].holder`,description="Pod holding the first lock"
// +kubebuilder:printcolumn:name="Token",type=integer,JSONPath=`.status.locks[0].token`,description="Fencing token of the first lock"
// +kubebuilder:printcolumn:name="Waiting",type=integer,JSONPath=`.status.locks[0].waiting`,description="Contenders waiting for the first lock"
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`,priority=1,description="spec.mode; empty: the default of each pod's workload kind"
// +kubebuilder:printcolumn:name="Traffic",type=string,JSONPath=`.spec.trafficPolicy`,priority=1,description="spec.trafficPolicy; empty: the default of each pod's workload kind"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DistributedLock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec declares the locks.
	// +required
	Spec DistributedLockSpec `json:"spec"`

	// status is what the operator last observed in the lock store.
	// +optional
	Status DistributedLockStatus `json:"status,omitempty"`
}

// DistributedLockList is a list of DistributedLocks.
//
// +kubebuilder:object:root=true
type DistributedLockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DistributedLock `json:"items"`
}
