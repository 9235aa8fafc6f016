// Package storepool keeps the operator's Cassandra sessions: one per distinct lock store
// connection, shared by every DistributedLock that uses it, created on first use (with the schema
// ensured, when asked) and closed after it has gone unused for a while. A connection whose attempt
// failed is remembered (a negative cache) and not tried again before a retry time that backs off
// exponentially, and callers wait for an attempt only briefly, so one hung Cassandra cannot hold
// up the operator's reconciles of other locks (see RetryError and WithConnectWait).
//
// The operator only reads lock state and revokes grants through the lock package; it never holds
// locks, so a session per connection is plenty.
package storepool
