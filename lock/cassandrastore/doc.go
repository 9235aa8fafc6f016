// Package cassandrastore is the Apache Cassandra implementation of lock.Store, on the gocql driver
// (github.com/apache/cassandra-gocql-driver/v2, the maintained continuation of
// github.com/gocql/gocql).
//
// # Tables
//
// Owner records live in table lock_owners, one partition per lock, and are written only by
// lightweight transactions (INSERT ... IF NOT EXISTS, UPDATE ... IF ...): never by plain writes or
// deletes, and never with a TTL, so fencing tokens never reset. Conditional writes are not marked
// idempotent, so the driver neither retries nor speculatively executes them; a write whose outcome
// is unknown comes back wrapped in lock.ErrUnknownOutcome and the lock settles it with a SERIAL
// read. Queue entries live in table lock_queue, one partition per lock, and are plain writes with
// a TTL: they only order waiters and age out when a waiter dies. A queue read returns each
// entry's write time (WRITETIME of its hint column), and a removal of an entry as read carries
// that time (USING TIMESTAMP), so it never removes a later rewrite (lock.Store.Dequeue).
//
// EnsureSchema creates the keyspace and both tables (schema.go: SchemaVersion, gc_grace_seconds
// of the queue QueueGCGraceSeconds, speculative_retry SpeculativeRetry on both) and upgrades
// older ones; New only checks them (ErrSchemaMissing while they are not there yet, ErrSchema for a
// newer version). A keyspace whose queue table lacks the hint column still works, without hints
// and without write times.
//
// # Checks at New
//
// New checks the server once before anything else: every node must run a Cassandra version whose
// lightweight transactions are linearizable (MinSafeVersions: the fix of CASSANDRA-12126, where a
// SERIAL read or a conditional write that did not apply could miss a Paxos proposal in progress
// that committed later), and the answering node must not run a paxos_variant that turns that fix
// off; otherwise ErrUnsafeServer. It refuses consistencies too weak for a lock (reads and queue
// writes at QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL; Paxos at SERIAL or LOCAL_SERIAL).
// WithClusterName pins the cluster a lock lives on (ErrClusterMismatch otherwise);
// Store.ClusterName tells which cluster was reached.
//
// # Connecting
//
// Connection is the one description of how to reach a cluster: contact points, keyspace, local
// data centre, consistencies, cluster name, and Credentials (a password login and TLS, built from
// PEM bytes or from files with LoadTLS). Its ClusterConfig and StoreOptions give the session and
// the options of New, so every program that holds or reads locks connects the same way. The
// session it configures routes every request to a replica of the lock's partition (token-aware;
// every request carries its routing key), tries a coordinator that recently answered late or not
// at all last for 30 s (slowhosts.go: a hung node costs a session one request, not every third),
// never leaves the local data centre (LocalDC) under a data-centre local consistency, reconnects to a
// restarted node within ReconnectInterval (docs/design.md, "A hung node"). CloseSession closes a
// session without hanging on the driver's own close.
package cassandrastore
