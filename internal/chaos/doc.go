// Package chaos checks what baton promises against the history of a run with real faults (issue
// 12): sidecar processes holding locks, apps writing to a fenced resource (package fencedstore)
// with their tokens, and a nemesis that kills, pauses, partitions and restarts them and the
// Cassandra nodes. This file set is the checker; the runner that produces histories builds on it.
//
// A History collects what happened, each fact with the time it refers to:
//
//   - a Hold is one process's grant of one lock, from its sidecar's own reports: from the
//     acquired event to the lost or released event, both dated by the sidecar (a lost or released
//     event is dated when the lease stopped being valid, its deadline if a paused sidecar noticed
//     later: lock.Lease.EndedAt), or, for a process the nemesis killed, until the kill;
//   - the fenced resource's record of every write, accepted or rejected, in the order it judged
//     them;
//   - faults and their healing, from the nemesis.
//
// Check then reports every Anomaly: two holds of one lock that overlap in time, a token that is
// not larger than every token granted before it, a token granted to two processes, a write the
// fenced resource accepted with a lower token than one it accepted before or with a token another
// writer set, and a lock not granted again within a bound after the last fault healed.
//
// What it does not guarantee: times are wall-clock times of one machine, so a run whose nemesis
// moves one process's wall clock must leave that process out of the overlap check (its fenced
// writes are still checked).
package chaos
