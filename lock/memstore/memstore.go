package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/lock"
)

// ErrTimeout is returned (wrapped) when a request or its response was lost or late.
var ErrTimeout = errors.New("memstore: request timed out")

// Event is one committed write of an owner record.
type Event struct {
	At     time.Time
	LockID string
	Prev   lock.Record
	Next   lock.Record
	// Admin marks a change made behind the lock's back (Delete, DeleteRecord, Restore): Next is
	// what the record became (the zero Record when it was deleted), not a conditional write.
	Admin bool
	// Queue is, for a write that granted the lock (to a new owner or with a new token), the live
	// entries of the lock's queue at that moment in queue order, each with the time it became live.
	Queue []QueuedEntry
}

// QueueChange is a queue entry becoming live (written while it was not) or ceasing to be (removed
// while it was). Entries that expire are not logged.
type QueueChange struct {
	At     time.Time
	LockID string
	Entry  lock.QueueEntry
	Live   bool
}

// QueueHistory returns every queue change in the order they happened.
func (s *Store) QueueHistory() []QueueChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.qlog)
}

// QueuedEntry is a live queue entry and since when it has been live (store time).
type QueuedEntry struct {
	lock.QueueEntry
	Since time.Time
}

// Store is the shared in-memory state. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	records map[string]lock.Record
	states  map[string]map[recordState]bool // every state each lock's record ever had
	pending map[string]*proposal
	queues  map[string]map[queueKey]*queued
	history []Event
	qlog    []QueueChange
	nextID  int
	stats   Stats
}

// queueKey names a queue entry, as the Store interface does: by enqueue time and owner.
type queueKey struct {
	enqueued int64
	owner    string
}

// queued is what the store keeps of a queue entry, reconciled as Cassandra reconciles cells: by
// the client-side timestamp of each write, the last write wins, and a removal (a tombstone) wins
// over every write with the same or an earlier timestamp, whenever it arrives. The entry is live
// while its latest write is later than its tombstone and has not expired.
type queued struct {
	hint    string
	written int64 // timestamp of the latest write (lock.QueueEntry's Written); 0: never written
	expires time.Time
	removed int64     // timestamp of the latest removal; 0: never removed
	touched time.Time // when a write or removal last reached it (store time)
	since   time.Time // when it last became live (store time)
}

// purgeAfter is how long the store keeps what it knows of an entry that is not live any more, as
// Cassandra keeps a tombstone for the queue table's gc_grace_seconds.
const purgeAfter = time.Minute

// purgeable reports whether the entry may be forgotten at now.
func (q *queued) purgeable(now time.Time) bool {
	return !q.live(now) && now.Sub(q.touched) >= purgeAfter && now.Sub(q.expires) >= purgeAfter
}

// live reports whether the entry is visible at now.
func (q *queued) live(now time.Time) bool {
	return q.written > q.removed && now.Before(q.expires)
}

// Stats counts the requests a Store served and the faults its clients injected.
type Stats struct {
	Requests, DroppedRequests, DroppedResponses, Stalls, Pauses        int
	AcceptedNotCommitted, CommittedLater, DroppedProposals, Duplicates int
	DelayedRequests, StaleReads                                        int
	// UnheldConditions counts conditional writes conditioned on a record state the lock's record
	// never had: what a write built from a forged hint sends, never one built from a read.
	UnheldConditions int
	// OverruledWrites counts queue writes that were acknowledged but left no trace, because a
	// removal with a later timestamp had reached the entry first.
	OverruledWrites int
}

// Faults returns how many faults of any kind were injected.
func (s Stats) Faults() int {
	return s.DroppedRequests + s.DroppedResponses + s.Stalls + s.Pauses + s.AcceptedNotCommitted + s.Duplicates +
		s.DelayedRequests + s.StaleReads
}

// Stats returns the counters so far.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func (s *Store) count(n *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*n++
}

// proposal is a conditional write that was accepted but not yet committed.
type proposal struct {
	id   int
	prev lock.Record
	next lock.Record
}

// New returns an empty store.
func New() *Store {
	return &Store{
		records: make(map[string]lock.Record),
		states:  make(map[string]map[recordState]bool),
		pending: make(map[string]*proposal),
		queues:  make(map[string]map[queueKey]*queued),
	}
}

// History returns every committed owner-record write in commit order.
func (s *Store) History() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.history)
}

// Record returns the committed owner record of lockID.
func (s *Store) Record(lockID string) (lock.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[lockID]
	return r, ok
}

// Delete removes lockID's owner record and queue, as an administrator truncating the tables
// would. The lock itself never deletes a record; tests use this to check that a re-created record
// does not issue old tokens again.
func (s *Store) Delete(lockID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteRecordLocked(lockID)
	delete(s.queues, lockID)
}

// DeleteRecord removes lockID's owner record alone, as an administrator truncating the owner table
// would; its queue stays.
func (s *Store) DeleteRecord(lockID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteRecordLocked(lockID)
}

func (s *Store) deleteRecordLocked(lockID string) {
	prev, ok := s.records[lockID]
	delete(s.records, lockID)
	delete(s.pending, lockID)
	if ok {
		s.history = append(s.history, Event{At: time.Now(), LockID: lockID, Prev: prev, Admin: true})
	}
}

// Restore sets lockID's owner record to rec, as restoring the owner table from a backup would:
// behind the lock's back, whatever the record is now.
func (s *Store) Restore(lockID string, rec lock.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.records[lockID]
	delete(s.pending, lockID)
	s.records[lockID] = rec
	s.rememberLocked(lockID, rec)
	s.history = append(s.history, Event{At: time.Now(), LockID: lockID, Prev: prev, Next: rec, Admin: true})
}

// recordState is what a conditional write compares of a record.
type recordState struct {
	version, token int64
	owner          string
	revoked        bool
	lease          time.Duration
}

func stateOf(r lock.Record) recordState {
	return recordState{version: r.Version, token: r.Token, owner: r.Owner, revoked: r.Revoked, lease: r.Lease}
}

func (s *Store) rememberLocked(lockID string, r lock.Record) {
	m := s.states[lockID]
	if m == nil {
		m = make(map[recordState]bool)
		s.states[lockID] = m
	}
	m[stateOf(r)] = true
}

// commitLocked makes a write visible and logs it, with the queue as it is for a grant.
func (s *Store) commitLocked(lockID string, prev, next lock.Record) {
	s.records[lockID] = next
	s.rememberLocked(lockID, next)
	e := Event{At: time.Now(), LockID: lockID, Prev: prev, Next: next}
	if next.Held() && (!prev.Held() || prev.Owner != next.Owner || prev.Token != next.Token) {
		e.Queue = s.liveQueueLocked(lockID, e.At)
	}
	s.history = append(s.history, e)
}

// liveQueueLocked returns lockID's live queue entries at now, in queue order.
func (s *Store) liveQueueLocked(lockID string, now time.Time) []QueuedEntry {
	var out []QueuedEntry
	for k, q := range s.queues[lockID] {
		if q.live(now) {
			out = append(out, QueuedEntry{QueueEntry: lock.QueueEntry{Enqueued: k.enqueued, Owner: k.owner, Hint: q.hint, Written: q.written}, Since: q.since})
		}
	}
	slices.SortFunc(out, func(a, b QueuedEntry) int { return compareEntries(a.QueueEntry, b.QueueEntry) })
	return out
}

func compareEntries(a, b lock.QueueEntry) int {
	if a.Less(b) {
		return -1
	}
	if b.Less(a) {
		return 1
	}
	return 0
}

// settleLocked decides an accepted write before a linearizable operation on lockID: it commits
// when commit is true, else it is dropped for good.
func (s *Store) settleLocked(lockID string, commit bool) {
	p := s.pending[lockID]
	if p == nil {
		return
	}
	delete(s.pending, lockID)
	if commit {
		s.stats.CommittedLater++
		s.commitLocked(lockID, p.prev, p.next)
	} else {
		s.stats.DroppedProposals++
	}
}

// Faults are the fault probabilities (0 to 1) and delays a Client injects into each request.
type Faults struct {
	// MinLatency and MaxLatency bound each leg (request and response) of every call.
	MinLatency, MaxLatency time.Duration
	// LWTLatency is the extra time a conditional write or a linearizable read takes at the store
	// before it applies: the Paxos round trips between coordinator and replicas that a plain read
	// or write does not make (in Cassandra a lightweight transaction makes four where a plain write
	// makes one). 0: the same as any call.
	LWTLatency time.Duration
	// DropRequest loses the request: nothing applies and the caller waits for its deadline.
	DropRequest float64
	// DropResponse applies the request but loses the response: the caller waits for its deadline.
	DropResponse float64
	// ApplyLater accepts a conditional write without committing it: it commits after a random delay
	// up to LaterBy, or at the next linearizable operation on its lock (or is dropped there), and the
	// caller waits for its deadline.
	ApplyLater float64
	LaterBy    time.Duration
	// Duplicate delivers a conditional write a second time, after a random delay up to LaterBy but
	// before the call returns, as a driver retry would.
	Duplicate float64
	// Stall delays a response by StallFor: the caller looks paused.
	Stall    float64
	StallFor time.Duration
	// DelayRequest holds a request in the network for up to DelayBy before it reaches the store.
	// The caller's deadline does not stop a request that is on its way: it still arrives, and a
	// caller that gave up sees a timeout.
	DelayRequest float64
	DelayBy      time.Duration
	// StaleRead makes a non-linearizable Load return the record as it was up to StaleBy ago, as a
	// replica that has not applied the latest Paxos commit yet would: an earlier committed
	// version, or none. Linearizable loads are never stale.
	StaleRead float64
	StaleBy   time.Duration
}

// Client is one process's view of a Store; it implements lock.Store.
type Client struct {
	s      *Store
	faults Faults

	mu          sync.Mutex
	seed        uint64
	streams     map[string]*rand.Rand // one random stream per kind of call
	partitioned time.Time             // requests fail until then
	paused      time.Time             // the process sends and receives nothing until then
	crashed     bool
	requests    int
	wall        func() time.Time // the process's wall clock: its queue writes' timestamps
	onFault     func(time.Duration)
	lastStamp   int64 // the last timestamp given to a queue write
	skipped     int   // queue writes that a later removal had already overruled
}

// Requests returns how many requests the client has sent.
func (c *Client) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

var _ lock.Store = (*Client)(nil)

// Client returns a view of the store that injects faults drawn from its own source seeded by seed.
func (s *Store) Client(seed uint64, f Faults) *Client {
	return &Client{s: s, faults: f, seed: seed, streams: make(map[string]*rand.Rand), wall: time.Now}
}

// SetWallClock sets the wall clock whose readings timestamp the client's queue writes and
// removals, as the Cassandra driver stamps each write with its process's clock: a client whose
// clock runs behind writes entries that an earlier removal by a client whose clock runs ahead
// overrules. The default is time.Now.
func (c *Client) SetWallClock(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = now
}

// OnFault sets a function that the client calls, from the calling goroutine, whenever it injects a
// fault into one of its requests, with how long from then the fault may hold the caller up: for a
// lost request or response the time left to the caller's deadline, for a stall, a delayed request,
// a write applied later or a stale read the fault's own length. Simulations use it to know when a
// process was hindered.
func (c *Client) OnFault(f func(d time.Duration)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onFault = f
}

// fault reports a fault of length d to the OnFault function, if any.
func (c *Client) fault(d time.Duration) {
	c.mu.Lock()
	f := c.onFault
	c.mu.Unlock()
	if f != nil {
		f(d)
	}
}

// untilDeadline is how long a caller waits for a lost request or response.
func untilDeadline(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return time.Minute
}

// stamp returns the timestamp of a queue write sent now: the wall clock in microseconds, never
// below the previous one plus one (a process's writes are ordered as it sent them).
func (c *Client) stamp() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastStamp = max(c.wall().UnixMicro(), c.lastStamp+1)
	return c.lastStamp
}

// OverruledWrites returns how many of the client's queue writes were acknowledged but left no
// trace, because a removal with a later timestamp had reached the entry first.
func (c *Client) OverruledWrites() int {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.skipped
}

// Partition makes every request of the client fail until d from now.
func (c *Client) Partition(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partitioned = time.Now().Add(d)
}

// Pause freezes the client's traffic for d, as a paused process (GC, SIGSTOP) that neither sends
// nor receives: requests and responses in flight wait until the pause ends.
func (c *Client) Pause(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused = time.Now().Add(d)
	c.s.count(&c.s.stats.Pauses)
}

func (c *Client) pauseLeft() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Until(c.paused)
}

// Crash cuts the client off for good, as if its process died.
func (c *Client) Crash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashed = true
}

// stream returns the random stream of one kind of call. Separate streams keep a history
// reproducible when calls of different kinds start at the same virtual instant and the Go
// scheduler picks their order. The caller holds c.mu.
func (c *Client) stream(kind string) *rand.Rand {
	r, ok := c.streams[kind]
	if !ok {
		h := fnv.New64a()
		h.Write([]byte(kind))
		r = rand.New(rand.NewPCG(c.seed, h.Sum64()))
		c.streams[kind] = r
	}
	return r
}

func (c *Client) chance(kind string, p float64) bool {
	if p <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stream(kind).Float64() < p
}

func (c *Client) upTo(kind string, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Duration(c.stream(kind).Int64N(int64(d) + 1))
}

func (c *Client) latency(kind string) time.Duration {
	return c.faults.MinLatency + c.upTo(kind, c.faults.MaxLatency-c.faults.MinLatency)
}

func (c *Client) cut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed || time.Now().Before(c.partitioned)
}

// timeout blocks until ctx ends and returns the timeout error.
func timeout(ctx context.Context, what string) error {
	<-ctx.Done()
	return fmt.Errorf("%w: %s: %w", ErrTimeout, what, ctx.Err())
}

// call runs op at the store between a request leg and a response leg, injecting faults. It returns
// errLost when the caller must see a timeout.
func (c *Client) call(ctx context.Context, what string, op func()) error {
	c.s.count(&c.s.stats.Requests)
	c.mu.Lock()
	c.requests++
	c.mu.Unlock()
	time.Sleep(c.pauseLeft())
	if c.chance(what, c.faults.DelayRequest) {
		// On its way whatever the caller's deadline says.
		c.s.count(&c.s.stats.DelayedRequests)
		c.fault(c.faults.DelayBy)
		time.Sleep(c.latency(what) + c.upTo(what, c.faults.DelayBy))
	} else if err := ctxtime.Sleep(ctx, c.latency(what)); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrTimeout, what, err)
	}
	if c.faults.LWTLatency > 0 && (what == "compare-and-swap" || what == "serial-load") {
		time.Sleep(c.faults.LWTLatency) // on its way at the store, whatever the caller's deadline
	}
	if c.cut() {
		return timeout(ctx, what)
	}
	if c.chance(what, c.faults.DropRequest) {
		c.s.count(&c.s.stats.DroppedRequests)
		c.fault(untilDeadline(ctx))
		return timeout(ctx, what)
	}
	op()
	if c.cut() {
		return timeout(ctx, what)
	}
	if c.chance(what, c.faults.DropResponse) {
		c.s.count(&c.s.stats.DroppedResponses)
		c.fault(untilDeadline(ctx))
		return timeout(ctx, what)
	}
	d := c.latency(what)
	if c.chance(what, c.faults.Stall) {
		c.s.count(&c.s.stats.Stalls)
		c.fault(c.faults.StallFor)
		d += c.faults.StallFor
	}
	// A late response is still delivered: the caller's deadline does not undo what happened.
	time.Sleep(d)
	time.Sleep(c.pauseLeft())
	return nil
}

// Load implements lock.Store.
func (c *Client) Load(ctx context.Context, lockID string, linearizable bool) (rec lock.Record, ok bool, err error) {
	kind := "load"
	if linearizable {
		kind = "serial-load"
	}
	commit := c.chance(kind, 0.5)
	stale := !linearizable && c.chance(kind, c.faults.StaleRead)
	staleBy := c.upTo(kind, c.faults.StaleBy)
	err = c.call(ctx, kind, func() {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		if linearizable {
			c.s.settleLocked(lockID, commit)
		}
		rec, ok = c.s.records[lockID]
		if stale {
			c.s.stats.StaleReads++
			rec, ok = c.s.recordAtLocked(lockID, time.Now().Add(-staleBy), rec, ok)
		}
	})
	if stale {
		c.fault(staleBy)
	}
	return rec, ok, err
}

// recordAtLocked returns lockID's committed record as it was at time at: the latest write
// committed by then, or none. cur and ok are the record now.
func (s *Store) recordAtLocked(lockID string, at time.Time, cur lock.Record, ok bool) (lock.Record, bool) {
	for i := len(s.history) - 1; i >= 0; i-- {
		e := s.history[i]
		if e.LockID != lockID {
			continue
		}
		if !e.At.After(at) {
			return e.Next, true
		}
		cur, ok = e.Prev, e.Prev.Version != 0
	}
	return cur, ok
}

// casMatches reports whether a compare-and-swap expecting prev applies to the stored record cur
// (exists tells whether there is one): with prev.Version 0 only when there is none, otherwise when
// cur has prev's version, owner, token, revoked flag and lease, the columns the Cassandra store's
// lightweight transaction compares.
func casMatches(cur lock.Record, exists bool, prev lock.Record) bool {
	if prev.Version == 0 {
		return !exists
	}
	return exists && cur.Version == prev.Version && cur.Owner == prev.Owner && cur.Token == prev.Token &&
		cur.Revoked == prev.Revoked && cur.Lease == prev.Lease
}

// CompareAndSwap implements lock.Store.
func (c *Client) CompareAndSwap(ctx context.Context, lockID string, prev, next lock.Record) (applied bool, cur lock.Record, ok bool, err error) {
	const kind = "compare-and-swap"
	commit := c.chance(kind, 0.5)
	later := c.chance(kind, c.faults.ApplyLater)
	laterBy := c.upTo(kind, c.faults.LaterBy)
	dup := c.chance(kind, c.faults.Duplicate)
	dupBy := c.upTo(kind, c.faults.LaterBy)
	var id int
	err = c.call(ctx, kind, func() {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		c.s.settleLocked(lockID, commit)
		if prev.Version != 0 && !c.s.states[lockID][stateOf(prev)] {
			c.s.stats.UnheldConditions++
		}
		cur, ok = c.s.records[lockID]
		if !casMatches(cur, ok, prev) {
			return
		}
		applied = true
		if later {
			c.s.nextID++
			c.s.stats.AcceptedNotCommitted++
			id = c.s.nextID
			c.s.pending[lockID] = &proposal{id: id, prev: cur, next: next}
			return
		}
		c.s.commitLocked(lockID, cur, next)
	})
	if dup {
		c.fault(dupBy)
		// A driver retry: the same conditional write delivered again before the call returns.
		// (Cassandra clients must never resend a conditional write after reporting on it.)
		_ = ctxtime.Sleep(ctx, dupBy)
		c.s.mu.Lock()
		c.s.stats.Duplicates++
		c.s.settleLocked(lockID, commit)
		if cur, ok := c.s.records[lockID]; casMatches(cur, ok, prev) {
			c.s.commitLocked(lockID, cur, next)
		}
		c.s.mu.Unlock()
	}
	if id != 0 {
		c.fault(max(laterBy, untilDeadline(ctx)))
		go func() {
			time.Sleep(laterBy)
			c.s.mu.Lock()
			defer c.s.mu.Unlock()
			if p := c.s.pending[lockID]; p != nil && p.id == id {
				c.s.settleLocked(lockID, true)
			}
		}()
		if err == nil {
			err = timeout(ctx, "compare-and-swap accepted, not committed")
		}
	}
	if err != nil {
		return false, lock.Record{}, false, fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, err)
	}
	return applied, cur, ok, nil
}

// Enqueue implements lock.Store. The write carries the client's timestamp (SetWallClock): it is
// acknowledged even when a removal with the same or a later timestamp overrules it.
func (c *Client) Enqueue(ctx context.Context, lockID string, e lock.QueueEntry, ttl time.Duration) error {
	ts := c.stamp()
	return c.call(ctx, "enqueue", func() {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		q := c.s.entryLocked(lockID, queueKey{e.Enqueued, e.Owner})
		now := time.Now()
		wasLive := q.live(now)
		switch {
		case ts <= q.removed:
			c.skipped++
			c.s.stats.OverruledWrites++
		case ts >= q.written:
			q.hint, q.written, q.expires = e.Hint, ts, now.Add(ttl)
		}
		if !wasLive && q.live(now) {
			q.since = now
			c.s.qlog = append(c.s.qlog, QueueChange{At: now, LockID: lockID, Entry: lock.QueueEntry{Enqueued: e.Enqueued, Owner: e.Owner}, Live: true})
		}
		q.touched = now
	})
}

// entryLocked returns the store's state of one queue entry, created empty when missing.
func (s *Store) entryLocked(lockID string, k queueKey) *queued {
	q := s.queues[lockID]
	if q == nil {
		q = make(map[queueKey]*queued)
		s.queues[lockID] = q
	}
	e := q[k]
	if e == nil {
		e = &queued{}
		q[k] = e
	}
	return e
}

// Dequeue implements lock.Store: a removal timestamped with e.Written when it is set (the write the
// remover saw), else with the client's clock.
func (c *Client) Dequeue(ctx context.Context, lockID string, e lock.QueueEntry) error {
	ts := e.Written
	if ts == 0 {
		ts = c.stamp()
	}
	return c.call(ctx, "dequeue", func() {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		q := c.s.entryLocked(lockID, queueKey{e.Enqueued, e.Owner})
		now := time.Now()
		wasLive := q.live(now)
		q.removed, q.touched = max(q.removed, ts), now
		if wasLive && !q.live(now) {
			c.s.qlog = append(c.s.qlog, QueueChange{At: now, LockID: lockID, Entry: lock.QueueEntry{Enqueued: e.Enqueued, Owner: e.Owner}, Live: false})
		}
	})
}

// Queue implements lock.Store.
func (c *Client) Queue(ctx context.Context, lockID string, from int64, limit int) ([]lock.QueueEntry, error) {
	var out []lock.QueueEntry
	err := c.call(ctx, "queue", func() {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		now := time.Now()
		for k, e := range c.s.queues[lockID] {
			if e.purgeable(now) {
				delete(c.s.queues[lockID], k)
				continue
			}
			if e.live(now) && k.enqueued >= from {
				out = append(out, lock.QueueEntry{Enqueued: k.enqueued, Owner: k.owner, Hint: e.hint, Written: e.written})
			}
		}
	})
	slices.SortFunc(out, compareEntries)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, err
}
