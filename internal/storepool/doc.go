// Package storepool keeps the operator's Cassandra sessions: one per distinct lock store
// connection, shared by every DistributedLock that uses it, created on first use (with the schema
// ensured, when asked) and closed after it has gone unused for a while.
//
// The operator only reads lock state and revokes grants through the lock package; it never holds
// locks, so a session per connection is plenty.
package storepool
