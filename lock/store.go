package lock

import (
	"context"
	"errors"
	"time"
)

// Record is the owner record of one lock: the single piece of state that decides who holds it.
//
// A store keeps one record per lock ID and changes it only through CompareAndSwap, so the record
// moves through a strictly increasing sequence of versions and never returns to an earlier state.
type Record struct {
	// Owner is the owner string (see Owner.String) of the current holder, or "" when the lock is free.
	Owner string
	// Token is the fencing token of the latest grant. It grows by one with every grant and is
	// never reset, so it stays strictly larger than every earlier grant's token. A new record
	// starts at FirstToken (wall-clock microseconds), so a deleted and re-created record does not
	// issue old tokens again.
	Token int64
	// Version grows by one with every write of the record. Every conditional write compares it.
	Version int64
	// Lease is the lease duration the owner promised to honour. Contenders wait at least this long
	// (measured on their own clock) before they treat an unchanged record as expired.
	Lease time.Duration
	// Revoked is set when an operator revoked the holder of Token. A revoked record still blocks
	// new grants until it has been observed unchanged for a full lease.
	Revoked bool
	// GrantedAt and RenewedAt are wall-clock times written by the owner for display only; the
	// lock never uses them to decide anything.
	GrantedAt time.Time
	RenewedAt time.Time
}

// Held reports whether the record names an owner.
func (r Record) Held() bool { return r.Owner != "" }

// sameState reports whether two records are the same write: the comparison used by expiry by
// observation.
func (r Record) sameState(o Record) bool {
	return r.Version == o.Version && r.Owner == o.Owner && r.Token == o.Token && r.Revoked == o.Revoked
}

// sameWrite reports whether two reads returned the same write of the record: the same state and
// the same display-only wall-clock times. Expiry by observation compares records this way. The
// times are never compared as times; they only tell apart two writes that reached the same
// version, owner and token by different paths: a record restored from a backup and granted again
// from there repeats an earlier state exactly, but not the moment it was written.
//
// A time that one of the two records lacks (zero) matches any: a conditional write that did not
// apply answers with the compared columns only, without the times.
func (r Record) sameWrite(o Record) bool {
	return r.sameState(o) && sameTime(r.GrantedAt, o.GrantedAt) && sameTime(r.RenewedAt, o.RenewedAt)
}

func sameTime(a, b time.Time) bool { return a.IsZero() || b.IsZero() || a.Equal(b) }

// olderThan reports whether r is an earlier state of the lock than o. Records are ordered by
// (Token, Version): within one record both only grow, and a record created again starts at a token
// above every earlier one (FirstToken) though its version restarts.
func (r Record) olderThan(o Record) bool {
	if r.Token != o.Token {
		return r.Token < o.Token
	}
	return r.Version < o.Version
}

// QueueEntry is one waiter in a lock's queue. Entries sort by (Enqueued, Owner), the order of the
// original algorithm's zero-padded "microseconds + thread id" queue columns (docs/design.md), and
// are identified by that pair: Hint and Written are what the entry carries, not part of its name.
type QueueEntry struct {
	// Enqueued is the waiter's wall-clock enqueue time in microseconds since the Unix epoch.
	Enqueued int64
	// Owner is the waiter's owner string.
	Owner string
	// Hint is the address at which the waiter listens for hand-off hints (see Hinter), "" when it
	// does not listen.
	Hint string
	// Written is the timestamp of the entry's last write, in microseconds, by which the store
	// reconciles the entry's writes and removals (in Cassandra the write time of the entry's row,
	// set by the writer's clock); 0 when the store cannot say. Every write changes it. Waiters
	// behind an entry tell from it whether its waiter still refreshes the entry (docs/design.md,
	// "Dead waiters"), and remove another owner's entry as the write they saw (see Dequeue).
	// Queue fills it in; Enqueue ignores it.
	Written int64
}

// Same reports whether e and o name the same queue entry: same enqueue time and owner.
func (e QueueEntry) Same(o QueueEntry) bool { return e.Enqueued == o.Enqueued && e.Owner == o.Owner }

// Less orders queue entries: earlier enqueue time first, then the smaller owner string.
func (e QueueEntry) Less(o QueueEntry) bool {
	if e.Enqueued != o.Enqueued {
		return e.Enqueued < o.Enqueued
	}
	return e.Owner < o.Owner
}

// ErrUnknownOutcome is returned (wrapped) by Store.CompareAndSwap when the store cannot tell
// whether the write was applied, for example after a timeout. The lock settles such a write with a
// linearizable Load before it reports anything. A store may return any other error for a write it
// knows was not applied; the lock treats every CompareAndSwap error as a possibly applied write.
var ErrUnknownOutcome = errors.New("lock: outcome of conditional write unknown")

// Store is the storage a Locker runs on. The Cassandra store (package cassandrastore) and the
// in-memory simulation store (package memstore) implement it.
//
// The owner record of a lock must be written only by CompareAndSwap (a lightweight transaction in
// Cassandra), never by plain writes or deletes. Queue entries are plain writes in separate storage.
type Store interface {
	// Load returns the lock's owner record; ok is false when the lock was never granted.
	// With linearizable set the read is linearizable (SERIAL in Cassandra) and settles every
	// conditional write whose outcome was unknown: after it returns, such a write is either visible
	// or will never apply.
	Load(ctx context.Context, lockID string, linearizable bool) (rec Record, ok bool, err error)
	// CompareAndSwap writes next if the stored record is still prev (same version, owner, token,
	// revoked flag and lease); prev.Version 0 means the record must not exist yet. It reports whether
	// it applied and, when it did not, the record it found (ok false when none exists).
	CompareAndSwap(ctx context.Context, lockID string, prev, next Record) (applied bool, current Record, ok bool, err error)
	// Enqueue writes (or rewrites) a queue entry, with its Hint, that disappears after ttl unless
	// rewritten. Entries are identified by (Enqueued, Owner): a rewrite replaces the Hint.
	Enqueue(ctx context.Context, lockID string, e QueueEntry, ttl time.Duration) error
	// Dequeue removes the queue entry named by e's Enqueued and Owner. Removing a missing entry is
	// not an error. Queue entries are plain writes reconciled by timestamp, the last write winning
	// and a removal winning ties. With e.Written set (an entry as read by Queue) the removal
	// carries that timestamp: it removes the write that was read and earlier ones, never a later
	// rewrite, whatever the remover's clock says. With e.Written 0 it carries the store's own
	// clock, never below the timestamps of its own earlier queue writes.
	Dequeue(ctx context.Context, lockID string, e QueueEntry) error
	// Queue returns up to limit live entries of the lock's queue whose Enqueued is at least from,
	// in queue order, with their Hints and Written stamps; from 0 reads the queue from its start. A bounded read need
	// not pass over the entries (and, in Cassandra, the tombstones of removed entries) before from.
	Queue(ctx context.Context, lockID string, from int64, limit int) ([]QueueEntry, error)
}
