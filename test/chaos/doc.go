// Package chaos checks what baton promises against the history of a run with real faults (issue
// 12): sidecar or `baton run` processes holding locks, apps (or baton run's command, chaoswriter)
// writing to a fenced resource (package fencedstore) with their tokens, and a nemesis that kills,
// pauses, partitions and restarts them and the Cassandra nodes. check.go and timing.go judge and
// time a History; run.go, proc.go, runner.go, nemesis.go and malformed.go (Linux only) produce
// one: Run starts the processes and their apps, runs the nemesis of one fault class from a seed,
// and returns the history with its anomalies.
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
// writer set, a lock not granted again within a bound after the last fault healed, a grant while
// quorum was lost, a hold lost while a fault left quorum in place, and a write of baton run's
// command after its lease's deadline. Run adds what only a live
// run sees: a sidecar that crashed, exited after SIGTERM still holding, answered a malformed
// request with anything but a JSON error, did not learn a revocation, or grew in goroutines or
// memory.
//
// Times are wall-clock times of one machine. The clock fault class moves a sidecar's monotonic
// and boot clocks (a Linux time namespace); namespaces do not cover the wall clock, so every
// report stays comparable. A nemesis that moved one process's wall clock would have to leave that
// process out of the overlap check (its fenced writes would still be checked).
package chaos
