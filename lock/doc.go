// Package lock is baton's distributed lock: a fair queue lock with fencing tokens on a store with
// compare-and-swap, such as Apache Cassandra's lightweight transactions. It knows nothing of
// Kubernetes.
//
// # Algorithm
//
// Each lock has an owner record and a queue (the "main row" and "queue row" of the Cassandra lock
// this package rebuilds; docs/design.md tells its story and the algorithm step by step). A waiter
// appends a queue entry ordered by (enqueue time, owner) and waits until it is the head; only the
// head contends for ownership, so locks are granted in arrival order. The head writes itself into
// the owner record with a compare-and-swap conditioned on exactly the record it read, bumping the
// fencing token in the same write. TryAcquire gives up when the record is held or someone is
// queued ahead. The holder renews its grant with compare-and-swaps, fences itself on its own
// clock, and gives the record back when it releases. Hand-off hints (Hinter) tell the one waiter
// concerned to look now instead of at its next poll.
//
// # Reading the code
//
// The files follow docs/design.md, whose "Code map" lists them by section: locker.go (the Locker),
// acquire.go (the acquire loop and steps 1 to 3), observe.go (expiry by observation), grant.go
// (steps 4 and 5), casfirst.go, deadhead.go, deadwaiters.go, queue.go and queueread.go (the
// queue), hint.go, renew.go, release.go, lease.go (what the holder sees), and request.go (request
// timeouts and settling). store.go is the Store contract, owner.go the owner strings and
// zero-wait restart, admin.go revocation and reads for the operator. mutation.go holds every
// deliberately unsafe variant the tests use to show that their checks can fail.
//
// # Rules
//
// The code cites these as "rule N".
//
//  1. Ownership of a lock lives in one record written only by compare-and-swap, never by plain
//     writes or deletes.
//  2. The fencing token is in that record, bumped in the same write that grants ownership, and never
//     expires or resets; a record created anew starts at its creation time in microseconds
//     (FirstToken).
//  3. A lease expires by observation: a contender takes over only after it has seen the very same
//     write of the record for a full lease on its own monotonic clock, counted from when its read
//     came back, and only with a compare-and-swap conditioned on exactly that record.
//  4. The holder fences itself at (send time of its last successful renewal) + lease − safety
//     margin on its own monotonic clock, tells the application before, and is never valid again.
//  5. A write whose outcome is unknown is settled by a linearizable read before anything is
//     reported; conditional writes are never retried blindly.
//  6. The queue gives fairness, not safety: waiters append their own entries, only the head
//     contends, entries of dead waiters age out, and waiters behind an entry that stopped being
//     refreshed remove it sooner.
//  7. Owners are unique (identity plus random incarnation). A grant is taken over without waiting
//     only when it is the Locker's own ended grant, or, with WithZeroWaitRestart, a grant of a dead
//     earlier incarnation of its identity that proved to know the same restart secret (zero-wait
//     restart). A revoked grant never is.
//  8. Revocation marks the grant revoked with a compare-and-swap conditioned on its token; the
//     holder learns it at its next renewal, and the next grant still waits one observed lease.
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
//     WithZeroWaitRestart, a grant of a dead earlier incarnation of its identity that knew the
//     same restart secret: a copied identity alone takes nothing over.
//   - Records are never taken over on an observation of another record: only reads of the very
//     same write count. Deleting or restoring owner records behind the lock's back still lets a
//     new grant overlap an old one for up to a renew interval, a restored record issues its tokens
//     again, and a restore that brings back a write a running Locker observed before is not seen
//     (docs/concepts-and-safety.md, "Restoring the keyspace").
//
// The simulation tests of this package check these claims on seeded histories with faults, and a
// mutation test makes sure that each of a set of deliberately unsafe variants of the lock
// (mutation.go) is caught.
//
// What it does not guarantee: a process that is paused (garbage collection, SIGSTOP, a slow
// network) after checking its lease can still act after the lease ended. Leases alone cannot stop
// that; fencing can. Pass Lease.Token to the resource you protect and have it reject tokens lower
// than the highest it has seen. Without fencing, baton gives leader election, not mutual exclusion.
//
// The queue provides fairness, not safety: queue entries are plain writes that expire when their
// waiter stops refreshing them, and wall-clock skew between machines can reorder waiters.
package lock
