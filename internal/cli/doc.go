// Package cli is the baton command-line tool, shipped in the same image as the sidecar, for apps
// that cannot speak HTTP to the sidecar's unix socket themselves (no curl in the image) and for
// scripts outside Kubernetes:
//
//	baton status [--socket PATH] [--json]
//	baton wait   [--socket PATH] [--lock ID] [--timeout 5m]
//	baton run    [--socket PATH] [--lock ID] [--wait 5m] [--grace 10s] -- CMD [ARGS...]
//	baton run    --cassandra-hosts HOSTS --lock ID [--wait 0] [--lease 15s] [--cassandra-keyspace baton]
//	             [Cassandra settings] [--create-schema] [--grace 10s] -- CMD [ARGS...]
//
// status and wait talk to the sidecar of the pod (package sidecarclient). run either uses the
// sidecar or, given Cassandra contact points, takes the lock itself like flock(1) does for a
// file: it holds the lock while CMD runs, hands CMD its fencing token in BATON_TOKEN and the lock
// ID in BATON_LOCK, and kills CMD's process group at once when the lock is lost, and by the
// lease's deadline (on a clock that counts suspended time) when no renewal came. Without a sidecar it reads the sidecar's own Cassandra settings (package cassandraflags:
// contact points, keyspace, local data centre, consistencies, credential and TLS files, server and
// cluster names), each a flag or its BATON_CASSANDRA_* variable.
//
// Exit codes: 0 success; 1 failure (wait timed out, sidecar or Cassandra unreachable); 2 usage
// error; 75 (EX_TEMPFAIL) run could not get the lock within --wait or lost it while CMD ran;
// otherwise run exits with CMD's exit code (128+N when CMD was killed by signal N, 127 when CMD
// was not found, 126 when it could not be started). 128+N also when baton itself got signal N
// before CMD started.
//
// What it does not guarantee: CMD is stopped by signals, which arrive late to a paused process;
// baton's own loss notice comes from the sidecar (or the lease's self-fencing) before anyone else
// can be granted the lock, but a paused or slow CMD can still act after that.
// Pass BATON_TOKEN to the resource you protect and have it reject tokens lower than the highest
// it has seen (fencing). "baton wait" reports that the locks were held when it returned, not that
// they still are.
//
// Main is the whole program behind a testable signature; cmd/baton only adds signal delivery and
// os.Exit.
package cli
