// Package memstore is an in-memory lock.Store for unit tests and deterministic simulation: a fake,
// never a stand-in for Cassandra in a test that claims Cassandra's behaviour (package storetest
// holds both to the same contract).
//
// A Store holds the state; each simulated process talks to it through its own Client, which
// injects the faults the process should suffer (Faults: latency, lightweight transactions slower
// than plain writes, dropped requests and responses, conditional writes that apply later or
// never, duplicated writes, delayed requests, stale reads, stalls) from its own seeded random
// source, and can be partitioned, paused or crashed. All waiting uses the time package, so inside
// a testing/synctest bubble the whole simulation runs on virtual time.
//
// Conditional writes follow the semantics of Cassandra's Paxos: a write whose outcome is unknown is
// either committed before the next linearizable operation on its lock (linearizable Load or
// CompareAndSwap) or never; plain reads do not see it until it commits. Queue writes and removals
// carry client-side timestamps (each Client's wall clock, SetWallClock) and are reconciled by them
// as Cassandra reconciles cells: the latest wins and a removal wins a tie.
//
// For the checkers, the Store records every committed owner-record write (History) and every queue
// entry becoming live or ceasing to be (QueueHistory), and an administrator's changes behind the
// lock's back (Delete, DeleteRecord, Restore).
package memstore
