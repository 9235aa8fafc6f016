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

// Shutdown bounds.
const (
	// DefaultShutdownTimeout is how long the sidecar may take to release its locks at SIGTERM and,
	// on clusters without native sidecars, how long its preStop hook holds back that SIGTERM.
	DefaultShutdownTimeout = 10 * time.Second
	// MaxShutdownTimeout is the longest of either that the webhook injects and the preStop hook
	// accepts.
	MaxShutdownTimeout = 5 * time.Minute
)
