// Package storetest is the contract of lock.Store as tests: the Cassandra store runs it against a
// real Cassandra and the in-memory store runs it without faults, so the simulations' store cannot
// drift from the real one on anything the lock relies on.
package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/lock"
)

var seq atomic.Int64

// lockID returns a lock ID no other test of this run uses.
func lockID() string {
	return fmt.Sprintf("storetest-%d-%d", time.Now().UnixNano()%1_000_000_000, seq.Add(1))
}

// Run runs the contract against the store that newStore returns (one per subtest; they may
// share the underlying storage, as every subtest uses lock IDs of its own).
func Run(t *testing.T, newStore func(t *testing.T) lock.Store) {
	t.Run("CompareAndSwapCreatesOnlyWhenAbsent", func(t *testing.T) { casCreates(t, newStore(t)) })
	t.Run("CompareAndSwapComparesTheWholeCondition", func(t *testing.T) { casCompares(t, newStore(t)) })
	t.Run("QueueOrderAndLimit", func(t *testing.T) { queueOrder(t, newStore(t)) })
	t.Run("DequeueRemovesOneEntry", func(t *testing.T) { dequeue(t, newStore(t)) })
	t.Run("QueueWrittenChangesWithEveryWrite", func(t *testing.T) { queueWritten(t, newStore(t)) })
	t.Run("DequeueAsSeenSparesALaterWrite", func(t *testing.T) { dequeueAsSeen(t, newStore(t)) })
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func held(owner string, token, version int64) lock.Record {
	return lock.Record{Owner: owner, Token: token, Version: version, Lease: 5 * time.Second}
}

func casCreates(t *testing.T, s lock.Store) {
	ctx, id := ctxFor(t), lockID()
	if _, ok, err := s.Load(ctx, id, true); err != nil || ok {
		t.Fatalf("Load of a lock never granted: ok %v, err %v; want no record", ok, err)
	}
	first := held("a", 100, 1)
	applied, _, _, err := s.CompareAndSwap(ctx, id, lock.Record{}, first)
	if err != nil || !applied {
		t.Fatalf("creating the record: applied %v, err %v", applied, err)
	}
	// A second create finds the record and says what it is.
	applied, cur, ok, err := s.CompareAndSwap(ctx, id, lock.Record{}, held("b", 100, 1))
	if err != nil || applied || !ok || !sameRecord(cur, first) {
		t.Fatalf("second create: applied %v, current %+v (ok %v), err %v; want not applied, current %+v", applied, cur, ok, err, first)
	}
	got, ok, err := s.Load(ctx, id, true)
	if err != nil || !ok || !sameRecord(got, first) {
		t.Fatalf("Load: %+v, ok %v, err %v; want %+v", got, ok, err, first)
	}
}

// casCompares: a conditional write applies only when version, owner, token, revoked flag and
// lease all match the stored record; any single difference leaves the record as it was and
// reports it.
func casCompares(t *testing.T, s lock.Store) {
	ctx, id := ctxFor(t), lockID()
	stored := held("a", 100, 1)
	if applied, _, _, err := s.CompareAndSwap(ctx, id, lock.Record{}, stored); err != nil || !applied {
		t.Fatalf("creating the record: applied %v, err %v", applied, err)
	}
	next := held("", 100, 2)
	for _, c := range []struct {
		name   string
		change func(*lock.Record)
	}{
		{"version", func(r *lock.Record) { r.Version++ }},
		{"owner", func(r *lock.Record) { r.Owner = "b" }},
		{"token", func(r *lock.Record) { r.Token++ }},
		{"revoked", func(r *lock.Record) { r.Revoked = true }},
		{"lease", func(r *lock.Record) { r.Lease = time.Second }},
	} {
		name, prev := c.name, stored
		c.change(&prev)
		applied, cur, ok, err := s.CompareAndSwap(ctx, id, prev, next)
		if err != nil || applied || !ok || !sameRecord(cur, stored) {
			t.Errorf("expecting a record with another %s: applied %v, current %+v (ok %v), err %v; want not applied, current %+v",
				name, applied, cur, ok, err, stored)
		}
	}
	if applied, _, _, err := s.CompareAndSwap(ctx, id, stored, next); err != nil || !applied {
		t.Fatalf("expecting the stored record exactly: applied %v, err %v", applied, err)
	}
	if got, _, err := s.Load(ctx, id, true); err != nil || !sameRecord(got, next) {
		t.Fatalf("after the write: %+v, %v; want %+v", got, err, next)
	}
}

func queueOrder(t *testing.T, s lock.Store) {
	ctx, id := ctxFor(t), lockID()
	entries := []lock.QueueEntry{
		{Enqueued: 30, Owner: "c", Hint: "198.18.0.3:9465"}, {Enqueued: 10, Owner: "b"},
		{Enqueued: 20, Owner: "a", Hint: "198.18.0.1:9465"}, {Enqueued: 10, Owner: "a", Hint: "local:a"},
	}
	for _, e := range entries {
		if err := s.Enqueue(ctx, id, e, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Clone(entries)
	slices.SortFunc(want, func(a, b lock.QueueEntry) int {
		if a.Less(b) {
			return -1
		}
		return 1
	})
	got, err := s.Queue(ctx, id, 0, 10)
	got = unstamped(got)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Queue: %v, %v; want %v (by enqueue time, then owner)", got, err, want)
	}
	if got, err := s.Queue(ctx, id, 0, 2); err != nil || !slices.Equal(unstamped(got), want[:2]) {
		t.Fatalf("Queue with limit 2: %v, %v; want %v", got, err, want[:2])
	}
	// A bounded read starts at the first entry enqueued at or after from.
	if got, err := s.Queue(ctx, id, 20, 10); err != nil || !slices.Equal(unstamped(got), want[2:]) {
		t.Fatalf("Queue from 20: %v, %v; want %v", got, err, want[2:])
	}
	if got, err := s.Queue(ctx, id, 11, 1); err != nil || !slices.Equal(unstamped(got), want[2:3]) {
		t.Fatalf("Queue from 11 with limit 1: %v, %v; want %v", got, err, want[2:3])
	}
	if got, err := s.Queue(ctx, id, 31, 10); err != nil || len(got) != 0 {
		t.Fatalf("Queue from after the tail: %v, %v; want none", got, err)
	}
	// Rewriting an entry (a waiter's refresh) keeps one entry, with the hint address of the rewrite.
	moved := entries[0]
	moved.Hint = "198.18.0.9:9465"
	if err := s.Enqueue(ctx, id, moved, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err = s.Queue(ctx, id, 0, 10)
	got = unstamped(got)
	if err != nil || len(got) != len(entries) || got[len(got)-1] != moved {
		t.Fatalf("after a refresh: %v, %v; want %d entries, the last %v", got, err, len(entries), moved)
	}
}

func dequeue(t *testing.T, s lock.Store) {
	ctx, id := ctxFor(t), lockID()
	a, b := lock.QueueEntry{Enqueued: 1, Owner: "a", Hint: "local:a"}, lock.QueueEntry{Enqueued: 2, Owner: "b", Hint: "local:b"}
	for _, e := range []lock.QueueEntry{a, b} {
		if err := s.Enqueue(ctx, id, e, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// An entry is named by its enqueue time and owner: the hint address does not matter.
	if err := s.Dequeue(ctx, id, lock.QueueEntry{Enqueued: a.Enqueued, Owner: a.Owner, Hint: "198.18.0.2:1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Dequeue(ctx, id, a); err != nil {
		t.Errorf("removing a missing entry: %v", err)
	}
	if got, err := s.Queue(ctx, id, 0, 10); err != nil || !slices.Equal(unstamped(got), []lock.QueueEntry{b}) {
		t.Fatalf("Queue: %v, %v; want [%v]", got, err, b)
	}
}

// queueWritten: every write of an entry, and nothing else, changes its Written stamp, whether or
// not it carries a hint address. Waiters tell a dead waiter's entry by a stamp that stays.
func queueWritten(t *testing.T, s lock.Store) {
	ctx, id := ctxFor(t), lockID()
	entries := []lock.QueueEntry{{Enqueued: 1, Owner: "a", Hint: "198.18.0.1:9465"}, {Enqueued: 2, Owner: "b"}}
	read := func() []lock.QueueEntry {
		t.Helper()
		got, err := s.Queue(ctx, id, 0, 10)
		if err != nil || len(got) != len(entries) {
			t.Fatalf("Queue: %v, %v; want %d entries", got, err, len(entries))
		}
		return got
	}
	for _, e := range entries {
		if err := s.Enqueue(ctx, id, e, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	first := read()
	for _, e := range first {
		if e.Written == 0 {
			t.Fatalf("entry %v has no Written stamp", e)
		}
	}
	if again := read(); !slices.Equal(again, first) {
		t.Fatalf("a second read without a write: %v; want %v", again, first)
	}
	for i, e := range entries {
		if err := s.Enqueue(ctx, id, e, time.Minute); err != nil {
			t.Fatal(err)
		}
		after := read()
		if after[i].Written == first[i].Written {
			t.Errorf("entry %v: Written %d unchanged by a rewrite", e, after[i].Written)
		}
		for j := range entries {
			if j > i && after[j].Written != first[j].Written {
				t.Errorf("entry %v: Written changed from %d to %d by a write of another entry", entries[j], first[j].Written, after[j].Written)
			}
		}
	}
}

// dequeueAsSeen: removing an entry with the Written stamp it was read with removes that write and
// nothing later, so a waiter that wrote its entry again after another judged it dead keeps it
// (issue 22, item 4); removing it as last written removes it. Written stamps are write timestamps:
// a later write of an entry has a larger one.
func dequeueAsSeen(t *testing.T, s lock.Store) {
	ctx, id := ctxFor(t), lockID()
	e := lock.QueueEntry{Enqueued: 1, Owner: "a", Hint: "198.18.0.1:9465"}
	read := func() []lock.QueueEntry {
		t.Helper()
		got, err := s.Queue(ctx, id, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err := s.Enqueue(ctx, id, e, time.Minute); err != nil {
		t.Fatal(err)
	}
	seen := read()
	if len(seen) != 1 || seen[0].Written == 0 {
		t.Fatalf("Queue: %v; want the entry with a Written stamp", seen)
	}
	if err := s.Enqueue(ctx, id, e, time.Minute); err != nil { // the waiter is alive after all
		t.Fatal(err)
	}
	rewritten := read()
	if len(rewritten) != 1 || rewritten[0].Written <= seen[0].Written {
		t.Fatalf("after a rewrite: %v; want the entry with a Written stamp above %d", rewritten, seen[0].Written)
	}
	if err := s.Dequeue(ctx, id, seen[0]); err != nil {
		t.Fatal(err)
	}
	if got := read(); !slices.Equal(got, rewritten) {
		t.Fatalf("removing the entry as first seen also removed its later write: %v; want %v", got, rewritten)
	}
	if err := s.Dequeue(ctx, id, rewritten[0]); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("removing the entry as last written: %v left; want none", got)
	}
}

// unstamped returns entries without their Written stamps, for comparisons with entries as written.
func unstamped(entries []lock.QueueEntry) []lock.QueueEntry {
	out := slices.Clone(entries)
	for i := range out {
		out[i].Written = 0
	}
	return out
}

// sameRecord compares what the lock decides on; the display-only times are left out.
func sameRecord(a, b lock.Record) bool {
	return a.Owner == b.Owner && a.Token == b.Token && a.Version == b.Version && a.Lease == b.Lease && a.Revoked == b.Revoked
}
