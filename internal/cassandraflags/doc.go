// Package cassandraflags reads how to reach the lock store from the sidecar contract's Cassandra
// settings (--cassandra-hosts / BATON_CASSANDRA_HOSTS, --cassandra-keyspace, --cassandra-local-dc,
// --cassandra-consistency, --cassandra-serial-consistency and the --cassandra-* credential, TLS
// and cluster-name files and names)
// into a cassandrastore.Connection.
//
// The sidecar and the baton CLI's mode without a sidecar both read their Cassandra settings here,
// so they accept the same flags and variables with the same defaults and messages, and connect
// the same way (authentication, TLS, a local data centre, consistencies, the cluster check).
package cassandraflags
