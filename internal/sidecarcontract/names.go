package sidecarcontract

import (
	"path"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// The socket of the sidecar's localhost API, in an emptyDir volume shared by the sidecar and every
// app container.
const (
	// SocketPath is the socket, in SocketDir. The sidecar serves it unless told otherwise (setting
	// Socket); apps find it in EnvSocket. The app-facing client package defines it.
	SocketPath = sidecarclient.SocketPath
)

// SocketDir is where the socket volume is mounted in the sidecar and the app containers: the
// directory of SocketPath, derived so that the two cannot disagree. Nothing writes it.
var SocketDir = path.Dir(SocketPath)

// The environment the webhook gives every app container.
const (
	// EnvSocket holds the path of the sidecar's socket. The sidecar reads the same variable for
	// setting Socket, so both agree on one value.
	EnvSocket = sidecarclient.EnvSocket
	// EnvLocks holds the DistributedLock's lock IDs, comma-separated.
	EnvLocks = "BATON_LOCKS"
)

// What the sidecar writes on its own pod.
const (
	// ConditionLockHeld is the readiness-gate condition of the ReadinessGate traffic policy: the
	// webhook adds the gate, the sidecar sets it True while it holds every lock.
	ConditionLockHeld = "baton.dev/lock-held"
	// ConditionSteppedAside is the sidecar's answer to the operator's baton.dev/superseded mark
	// (handoff NewestRevision): True, with the mark as its message, once the sidecar takes no grant
	// while the mark stays on the pod (it left the queue, refuses acquisitions, and none is in
	// flight); False once it read the pod without the mark and may take grants again. The operator
	// marks an old holder only once every old pod that does not hold has stepped aside.
	ConditionSteppedAside = "baton.dev/stepped-aside"
	// LabelRole is the pod label of the Label traffic policy.
	LabelRole = "baton.dev/role"
	// RoleHolder and RoleStandby are the values of LabelRole.
	RoleHolder  = "holder"
	RoleStandby = "standby"
)

// Shutdown bounds.
const (
	// DefaultShutdownTimeout is how long the sidecar may take to release its locks at SIGTERM and,
	// on clusters without native sidecars, how long its preStop hook holds back that SIGTERM.
	DefaultShutdownTimeout = 10 * time.Second
	// MaxShutdownTimeout is the longest of either that the webhook injects and the preStop hook
	// accepts.
	MaxShutdownTimeout = 5 * time.Minute
)
