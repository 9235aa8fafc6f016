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
package cassandrastore
