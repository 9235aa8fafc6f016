// Package lock is baton's distributed lock: a fair queue lock with fencing tokens on a store with
// compare-and-swap, such as Apache Cassandra's lightweight transactions. It knows nothing of
// Kubernetes.
//
// # Algorithm
//
// Each lock has an owner record and a queue (the seed thesis's "main row" and "queue row"). A
// waiter appends a queue entry ordered by (enqueue time, owner) and waits until it is the head; only
// the head contends for ownership, so locks are granted in arrival order. The head writes itself
// into the owner record with a compare-and-swap conditioned on exactly the record it read, bumping
// the fencing token in the same write. TryAcquire gives up when the record is held or someone is
// queued ahead.
//
// # Safety model
//
// What the package guarantees, given a store whose compare-and-swap and linearizable reads are
// linearizable (Cassandra LWT with SERIAL or LOCAL_SERIAL):
//
//   - The store never grants overlapping leases: a grant happens only by a compare-and-swap on an
//     unchanged record, and a record held by someone else is taken over only after this Locker has
//     seen it unchanged for a full lease (the longer of its own and the holder's) on its own clock.
//   - The holder stops claiming the lock before anyone else can be granted it: a Lease counts
//     itself lost at (send time of its last successful renewal) + lease − safety margin, on its own
//     monotonic clock, and closes Done then; past that moment it is never valid again. Safety needs
//     clocks that run at about the same rate (the margin absorbs the difference), never clocks that
//     agree. The default clock counts time the machine spent suspended (CLOCK_BOOTTIME on Linux),
//     which Go's monotonic clock does not.
//   - Every grant carries a fencing token strictly larger than every earlier grant's token for
//     the same lock. Tokens never reset; a record created anew starts at FirstToken (wall-clock
//     microseconds), above anything a deleted record issued.
//   - A write whose outcome is unknown is settled by a linearizable read before anything is
//     reported, and conditional writes are never retried blindly. An Acquire whose context ends
//     while its grant is in flight settles it and gives back a grant that applied.
//   - Two Lockers never share an Owner (NewOwner draws a random incarnation), and a Locker takes
//     over a grant without waiting only when it is its own ended grant, or, with
//     WithZeroWaitRestart, a grant of a dead earlier incarnation of its identity.
//
// The simulation tests of this package check these claims on seeded histories with faults, and a
// mutation test makes sure that each of a set of deliberately unsafe variants of the lock is
// caught.
//
// What it does not guarantee: a process that is paused (garbage collection, SIGSTOP, a slow
// network) after checking its lease can still act after the lease ended. Leases alone cannot stop
// that; fencing can. Pass Lease.Token to the resource you protect and have it reject tokens lower
// than the highest it has seen. Without fencing, baton gives leader election, not mutual exclusion.
//
// The queue provides fairness, not safety: queue entries are plain writes that expire when their
// waiter stops refreshing them, and wall-clock skew between machines can reorder waiters.
package lock
