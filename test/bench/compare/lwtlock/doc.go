// Package lwtlock is a plain lock on Cassandra lightweight transactions without a queue, kept only
// as a benchmark baseline for baton's queue lock: it shows what the queue adds (fairness, bounded
// polling) on top of a correct compare-and-swap lock.
//
// Per lock there is one row (owner, version), written only by lightweight transactions. A contender
// reads the row (QUORUM) every poll interval; when it is absent or free it claims it with
// INSERT ... IF NOT EXISTS or UPDATE ... IF version = v. A holder renews every lease/3 with
// UPDATE ... IF version = v, counts the lock lost at (send time of its last successful write) +
// lease − lease/10 on its own monotonic clock, and releases by writing an empty owner, again
// IF version = v. A contender takes over a holder that stopped renewing only after it has seen the row
// unchanged for a full lease on its own clock (expiry by observation); no TTL is involved. A write
// whose outcome is unknown is settled with a SERIAL read.
//
// What it does not do: it is not fair (whoever polls first after a release wins, typically the
// thread that just released), every waiter polls at the same fixed rate however many there are,
// and it hands out no fencing token (the version would do, but nothing here passes it on).
package lwtlock
