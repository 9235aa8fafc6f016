// Package sidecarcontract is what the parts of baton that meet in a pod agree on: the operator's
// injecting webhook (which writes the sidecar's settings into the pod spec), the sidecar (which
// reads them and serves the socket), the baton CLI and the application (which find the socket)
// and the operator's status reader (which reads the owner identities the sidecar writes).
//
// It holds names and rules, and the few helpers that read and check them:
//   - the table of sidecar settings, each a flag and an environment variable with a usage line
//     and a default (Setting, Settings, CassandraSettings), how a program reads them (Register,
//     Values: the flag, else the variable, else the default), lists them (WriteUsage) and names them
//     in errors (SettingError), and how lists in them are written (SplitList);
//   - the socket (SocketDir, SocketPath) and the application's environment (EnvSocket, EnvLocks);
//   - shutdown bounds (DefaultShutdownTimeout, MaxShutdownTimeout);
//   - what a declared lock ID and a lock-store consistency may be (LockIDProblems,
//     ValidConsistency, ValidSerialConsistency);
//   - the store key of a lock ID and the owner identity of a pod (StoreLockID, OwnerIdentity,
//     PodOfOwner).
//
// The baton.dev keys on pods (the readiness-gate condition, the role label, the injection
// markers) are in api/v1 with every other key users see.
//
// It imports only the baton.dev/v1 API types, the app-facing sidecarclient (for the socket's path
// and variable, which apps need without baton's internals; it imports only the standard library)
// and the standard library, so the injection policy can use it without pulling in the sidecar's
// runtime (the Cassandra driver, client-go, Prometheus).
package sidecarcontract
