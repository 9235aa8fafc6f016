// Package oldalgo is the "old algorithm" of the Cassandra lock baton rebuilds (docs/design.md) on
// Apache Cassandra, kept only as a benchmark baseline for baton's queue lock. It is neither safe nor fair: never use
// it to protect anything.
//
// # Algorithm
//
// Per lock there is a main row (the owner) and a shadow row (where attempts collide), both plain
// Cassandra rows written and read at QUORUM, one cell per thread. TryLock:
//
//  1. Read the main row. If it holds exactly one cell, return Success when it is ours and
//     AnotherThreadIsOwner otherwise (any other non-empty main row is AnotherThreadIsOwner too).
//  2. Write our cell into the shadow row and read the whole shadow row back.
//  3. If our cell is alone there and the main row is still empty, write our cell into the main row,
//     delete ours from the shadow row and return Success.
//  4. Otherwise delete ours from the shadow row and return ConcurrentAttempt.
//
// GetLock repeats TryLock, sleeping a random 0–1000 ms after AnotherThreadIsOwner and
// a random 0–50×attempt ms after the attempt-th ConcurrentAttempt. Cells carry a TTL (the lease);
// a background goroutine rewrites the held main cell every TTL/2 and release deletes it.
//
// # What is wrong with it
//
// These are the reasons baton replaced it; they are kept on purpose:
//
//   - No fencing token and no self-fencing: a holder paused for longer than the TTL (garbage
//     collection, a slow network) keeps acting after its cell expired and another thread took the
//     lock, and nothing tells it so.
//   - Expiry is a Cassandra TTL, judged on the nodes' wall clocks; mutual exclusion also rests on
//     QUORUM reads seeing QUORUM writes and on last-write-wins timestamps
//     taken from the clients' clocks, so clock skew and retried writes can break it.
//   - Contenders never coordinate: every attempt writes and re-reads the shadow row, so the more
//     threads there are, the more attempts collide (ConcurrentAttempt) and the longer the lock
//     stays free while everybody sleeps.
//   - Unfair: a thread that just released tries again at once while the others sleep up to a
//     second, so it tends to win again (the original design reports exactly this).
package oldalgo
