// Package cassandrastore is the Apache Cassandra implementation of lock.Store, on the gocql driver
// (github.com/apache/cassandra-gocql-driver/v2, the maintained continuation of
// github.com/gocql/gocql).
//
// Owner records live in table lock_owners, one partition per lock, and are written only by
// lightweight transactions (INSERT ... IF NOT EXISTS, UPDATE ... IF ...): never by plain writes or
// deletes, and never with a TTL, so fencing tokens never reset. Conditional writes are not marked
// idempotent, so the driver neither retries nor speculatively executes them; a write whose outcome
// is unknown comes back wrapped in lock.ErrUnknownOutcome and the lock settles it with a SERIAL
// read. Queue entries live in table lock_queue and are plain writes with a TTL: they only order
// waiters and age out when a waiter dies.
//
// New checks the server once before anything else: every node must run a Cassandra version whose
// lightweight transactions are linearizable (3.0.24, 3.11.10, 4.0-beta4 or later: the fix of
// CASSANDRA-12126, where a SERIAL read or a conditional write that did not apply could miss a Paxos
// proposal in progress that committed later), and the answering node must not run a paxos_variant
// that turns that fix off; otherwise ErrUnsafeServer. WithClusterName pins the cluster a lock lives
// on (ErrClusterMismatch otherwise). Store.ClusterName tells which cluster was reached.
//
// Connection is the one description of how to reach a cluster: contact points, keyspace, local
// data centre, consistencies, cluster name, and Credentials (a password login and TLS, built from
// PEM bytes or from files with LoadTLS). Its ClusterConfig and StoreOptions give the session and
// the options of New, so every program that holds or reads locks connects the same way.
package cassandrastore
