package lock_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

// hintFaults is what the simulated hint network does to hints.
type hintFaults struct {
	lose, duplicate float64       // chance that a hint is lost, or delivered twice
	maxDelay        time.Duration // a hint arrives after up to this long
	forgeEvery      time.Duration // a forger sends a hint to a random waiter this often (0: never)
	// forgeVersions makes the forger's "free" hints name a record version and token near the
	// current record's (the current one, one more, one less), as a forger reading the owner record
	// would, instead of none.
	forgeVersions bool
}

// simHinter is the hint network of one simulated history: every client listens on it, as sidecars
// listen on their pod IPs. It loses, duplicates and delays hints, and a forger sends hints that are
// well-formed (the right lock, owner and enqueue time of a live queue entry) but say nothing true.
type simHinter struct {
	f      hintFaults
	seed   uint64
	faults *faultLog

	mu      sync.Mutex
	rng     *rand.Rand                // the forger's
	waiters map[string]chan lock.Hint // by address
}

var _ lock.Hinter = (*simHinter)(nil)

func newSimHinter(f hintFaults, seed uint64, faults *faultLog) *simHinter {
	return &simHinter{f: f, seed: seed, faults: faults, rng: rand.New(rand.NewPCG(seed, 7)), waiters: make(map[string]chan lock.Hint)}
}

func (h *simHinter) Listen(lockID, owner string) (string, <-chan lock.Hint, func()) {
	addr, ch := lockID+"|"+owner, make(chan lock.Hint, 2)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiters[addr] = ch
	return addr, ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.waiters[addr] == ch {
			delete(h.waiters, addr)
		}
	}
}

// Send decides a hint's fate from the hint itself and the history's seed, not from the order in
// which goroutines send, so that a seed replays the same history.
func (h *simHinter) Send(addr string, hint lock.Hint) {
	f := fnv.New64a()
	fmt.Fprintf(f, "%d|%s|%+v", h.seed, addr, hint)
	rng := rand.New(rand.NewPCG(f.Sum64(), 3))
	copies := 1
	switch r := rng.Float64(); {
	case r < h.f.lose:
		copies = 0
	case r < h.f.lose+h.f.duplicate:
		copies = 2
	}
	if copies != 1 {
		h.faults.note()
	}
	for range copies {
		delay := time.Duration(rng.Int64N(int64(h.f.maxDelay) + 1))
		time.AfterFunc(delay, func() { h.deliver(addr, hint) })
	}
}

func (h *simHinter) deliver(addr string, hint lock.Hint) {
	if hint.Kind == lock.HintProbe {
		// Every client's Hinter answers probes, whether or not anyone listens at addr: the echo
		// goes back to the prober's address, through the same lossy network.
		hint.Kind = lock.HintEcho
		h.Send(hint.LockID+"|"+hint.Owner, hint)
		return
	}
	h.mu.Lock()
	ch := h.waiters[addr]
	h.mu.Unlock()
	select {
	case ch <- hint:
	default: // no listener (nil channel) or two hints pending already
	}
}

// forge sends forged hints until ctx ends: to a random live queue entry, of a random kind; with
// forgeVersions a "free" hint names a version and token near the record's in mem.
func (h *simHinter) forge(ctx context.Context, store *memstore.Client, mem *memstore.Store) {
	if h.f.forgeEvery == 0 {
		return
	}
	for ctx.Err() == nil {
		// Random instants (to the nanosecond), so that the forger never acts at the very instant
		// another goroutine does: their order would differ between runs of one seed.
		h.mu.Lock()
		pause := h.f.forgeEvery/2 + time.Duration(h.rng.Int64N(int64(h.f.forgeEvery)))
		h.mu.Unlock()
		time.Sleep(pause)
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		queue, err := store.Queue(qctx, simLockID, 0, 64)
		cancel()
		if err != nil || len(queue) == 0 {
			continue
		}
		h.mu.Lock()
		e := queue[h.rng.IntN(len(queue))]
		kind := lock.HintKind(1 + h.rng.IntN(2))
		hint := lock.Hint{LockID: simLockID, Owner: e.Owner, Enqueued: e.Enqueued, Kind: kind}
		if rec, ok := mem.Record(simLockID); ok && h.f.forgeVersions && kind == lock.HintFree {
			hint.Version = max(1, rec.Version+int64(h.rng.IntN(3)-1))
			hint.Token = rec.Token + int64(h.rng.IntN(3)-1)
		}
		h.mu.Unlock()
		h.faults.note()
		h.deliver(e.Hint, hint)
	}
}
