// Package memstore is an in-memory lock.Store for unit tests and deterministic simulation.
//
// A Store holds the state; each simulated process talks to it through its own Client, which
// injects the faults the process should suffer (latency, dropped requests and responses,
// conditional writes that apply later or never, duplicated writes, stalls and partitions) from its
// own seeded random source. All waiting uses the time package, so inside a testing/synctest bubble
// the whole simulation runs on virtual time.
//
// Conditional writes follow the semantics of Cassandra's Paxos: a write whose outcome is unknown is
// either committed before the next linearizable operation on its lock (linearizable Load or
// CompareAndSwap) or never; plain reads do not see it until it commits.
package memstore
