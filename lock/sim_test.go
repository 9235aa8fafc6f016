package lock_test

// Deterministic simulation harness: simulated clients run the real Locker against memstore inside
// a testing/synctest bubble (virtual time), with faults drawn from seeded sources. Each history is
// checked with porcupine against a lock model, with a direct overlap check and with a fenced
// register.
//
// A grant is recorded the way the rest of the world sees it: it starts when the granting write
// committed in the store (not when Acquire returned), and it ends when its holder stopped claiming
// it: when Lease.Done closed (release, loss, or the self-fence deadline of a holder that was cut
// off or paused), or when its process died. Only a process that is known to be dead (it crashed
// and its identity restarted: the kubelet's guarantee) ends its claim at the crash.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"k8s.io/utils/clock"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

const simLockID = "sim/orders"

// faultClass is one kind of trouble the simulation throws at the lock.
type faultClass struct {
	name     string
	clients  int
	duration time.Duration
	lease    time.Duration
	faults   memstore.Faults
	// drift is the largest clock-rate error of a client (0.01 = 1%).
	drift float64
	// wallJumps makes clients' wall clocks jump by up to a minute either way.
	wallJumps bool
	// partitions cuts clients off the store for up to two leases at a time, while they wait and
	// while they hold the lock.
	partitions bool
	// cutAfterRenewal is the chance that a holder is cut off the store for up to two leases right
	// after a renewal succeeded: the moment its claim reaches furthest ahead of what contenders saw.
	cutAfterRenewal float64
	// crashes kills holders without release. Half of them die (the process is gone; its identity
	// restarts, at once or later), half are cut off for good and keep running until their
	// self-fence (a lost node; a new pod with a new identity replaces it).
	crashes bool
	// zeroWait gives clients WithZeroWaitRestart, as sidecars have.
	zeroWait bool
	// sharedIdentity makes clients 0 and 1 share one identity, as two CLI processes with the same
	// host name and PID do. They never use zero-wait restart.
	sharedIdentity bool
	// revoke lets an operator revoke the current holder now and then.
	revoke bool
	// appPause pauses the whole process (its store traffic and its application) between checking
	// its lease and writing, for up to three leases.
	appPause bool
	// try makes half of the attempts TryAcquire.
	try bool
	// contenderLease, if set, is the lease of odd-numbered clients (mixed configurations).
	contenderLease time.Duration
	// unsafeFastClock gives client 1 a clock running 60% fast: far beyond the safety margin. Only
	// for checking that the checker catches the resulting overlaps.
	unsafeFastClock bool
	// hints is what the hint network between the clients does to hints.
	hints hintFaults
	// wallSkew offsets each process's wall clock by a fixed amount of up to this much either way:
	// its queue enqueue times and the timestamps by which the store reconciles its queue writes.
	wallSkew time.Duration
	// waiterCuts cuts a waiter off the store for 1-2 times the queue entry TTL, 0.3-3 s after it
	// began to wait (unless it was granted first): long enough for the waiters behind it to judge
	// it dead and remove its entry.
	waiterCuts bool
	// restore makes an administrator delete the owner record now and then, or restore an earlier
	// state of it (one superseded at least two observation lives ago, as a backup would hold).
	restore bool
	// copiedIdentity makes clients 0 and 1 share one identity, both with zero-wait restart but
	// each with the restart secret of its own pod: a process that copied another's identity.
	copiedIdentity bool
	// tryPollers makes that many clients Try-mode pollers: they ask with TryAcquire every 20-100
	// ms and hold briefly, as apps of Try-mode sidecars do.
	tryPollers int
	// queueTTL is the queue entry TTL (default 2 s).
	queueTTL time.Duration
	// maxHold bounds how long a holder keeps the lock (default two leases).
	maxHold time.Duration
	// idle makes blocking clients wait up to this long after a release before they ask again, so
	// that the lock is free now and then with few waiters or none.
	idle time.Duration
	// checkFIFO checks queue order: no waiter is overtaken by an acquisition that began after its
	// entry was in the queue, but for the exceptions fifo names.
	checkFIFO bool
	// livenessBound, when set, checks liveness: a live blocking waiter is granted within this long
	// of the later of its start and the last fault anywhere.
	livenessBound time.Duration
	// checkHintCost checks that no conditional write was conditioned on a record state the lock
	// never had (what a grant on a forged hint's word sends).
	checkHintCost bool
	// mutation makes every client a deliberately unsafe variant of the lock (mutation test only).
	mutation string
}

// entryTTL returns the queue entry TTL of the class.
func (c faultClass) entryTTL() time.Duration {
	if c.queueTTL > 0 {
		return c.queueTTL
	}
	return 2 * time.Second
}

// holdFor returns how long holders of the class keep the lock at most.
func (c faultClass) holdFor() time.Duration {
	if c.maxHold > 0 {
		return c.maxHold
	}
	return 2 * c.lease
}

// history is what one simulated run produced.
type history struct {
	class      faultClass
	start, end time.Time // when the clients started, and when they were told to stop
	claims     []claim
	attempts   []attempt
	grants     int
	writes     int
	rejected   int
	faults     int
	faultLog   []faultAt
	shared     []string // violations seen by the fenced register
	events     []memstore.Event
	queue      []memstore.QueueChange
	unheld     int // conditional writes conditioned on a record state the lock never had
	overruled  int // queue writes acknowledged but overruled by an earlier-arrived later removal
}

// claim is one grant as its holder lived it.
type claim struct {
	client   int
	owner    string
	token    int64
	returned time.Time // Acquire returned it
	ended    time.Time // its holder stopped claiming it
	how      string    // how it ended
}

type acquireIn struct{ client int }
type acquireOut struct{ token int64 }
type endIn struct {
	client int
	token  int64
}

// lockModel is the sequential specification: one holder at a time, tokens strictly increasing.
var lockModel = porcupine.Model{
	Init: func() any { return lockState{holder: -1} },
	Step: func(state, input, output any) (bool, any) {
		s := state.(lockState)
		switch in := input.(type) {
		case acquireIn:
			out := output.(acquireOut)
			if s.holder != -1 || out.token <= s.token {
				return false, s
			}
			return true, lockState{holder: in.client, token: out.token}
		case endIn:
			if s.holder != in.client || s.token != in.token {
				return false, s
			}
			return true, lockState{holder: -1, token: s.token}
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case acquireIn:
			return fmt.Sprintf("client %d granted token %d", in.client, output.(acquireOut).token)
		case endIn:
			return fmt.Sprintf("client %d stops claiming token %d", in.client, in.token)
		}
		return "?"
	},
}

type lockState struct {
	holder int
	token  int64
}

// attempt is one Acquire or TryAcquire call.
type attempt struct {
	client     int
	owner      string
	block      bool
	start, end time.Time // end is zero when the call was still running when the history ended
	granted    bool
	wallOffset time.Duration // the process's wall clock minus true time when the call began
}

// recorder collects claims and attempts in virtual time.
type recorder struct {
	mu       sync.Mutex
	claims   []*claim
	attempts []*attempt
}

// attempting records the start of an acquisition and returns the function that records its end.
func (r *recorder) attempting(client int, owner string, block bool, wallOffset time.Duration) func(granted bool) {
	a := &attempt{client: client, owner: owner, block: block, start: time.Now(), wallOffset: wallOffset}
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
	return func(granted bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		a.end, a.granted = time.Now(), granted
	}
}

func (r *recorder) allAttempts() []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copies(r.attempts)
}

// copies returns the values ps point to, so that a checker reads them without the recorder's lock.
func copies[T any](ps []*T) []T {
	out := make([]T, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out
}

// faultAt is one injected fault: the client it hit (-1: the lock or every client) and when.
type faultAt struct {
	client   int
	from, to time.Time
}

// faultLog counts injected faults and remembers when each hit whom, for the checkers that must
// know when the faults healed.
type faultLog struct {
	mu    sync.Mutex
	n     int
	spans []faultAt
}

// add records a fault hitting client from now for d.
func (f *faultLog) add(client int, d time.Duration) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.spans = append(f.spans, faultAt{client: client, from: now, to: now.Add(d)})
}

// span records that a fault injected into a store request (counted by the store) hinders client
// from now for d.
func (f *faultLog) span(client int, d time.Duration) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spans = append(f.spans, faultAt{client: client, from: now, to: now.Add(d)})
}

// note counts a fault whose cost is bounded by a poll (a lost or duplicated hint) without a span.
func (f *faultLog) note() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
}

func (f *faultLog) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *faultLog) all() []faultAt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.spans)
}

// acquired records a grant returned to client and returns a function that ends the claim (the
// first call counts).
func (r *recorder) acquired(client int, lease *lock.Lease) func(how string) {
	c := &claim{client: client, owner: lease.Owner().String(), token: lease.Token(), returned: time.Now()}
	r.mu.Lock()
	r.claims = append(r.claims, c)
	r.mu.Unlock()
	var once sync.Once
	return func(how string) {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			c.ended, c.how = time.Now(), how
		})
	}
}

func (r *recorder) all() []claim {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copies(r.claims)
}

// fencedRegister is the protected resource: it accepts a write only with a token at least as large
// as every token it has seen, and remembers which client wrote each token.
type fencedRegister struct {
	mu       sync.Mutex
	max      int64
	writer   map[int64]int
	accepted int
	rejected int
	problems []string
}

func (f *fencedRegister) write(client int, token int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.max {
		f.rejected++
		return
	}
	if w, ok := f.writer[token]; ok && w != client {
		f.problems = append(f.problems, fmt.Sprintf("fenced register: token %d written by clients %d and %d", token, w, client))
	}
	f.writer[token] = client
	f.max = token
	f.accepted++
}

// driftClock is a client's clock: virtual time running at rate, plus a wall-clock offset that can
// jump. It implements clock.WithDelayedExecution.
type driftClock struct {
	origin time.Time
	rate   float64
	mu     sync.Mutex
	wall   time.Duration
}

var _ clock.WithDelayedExecution = (*driftClock)(nil)

func (c *driftClock) Now() time.Time {
	return c.origin.Add(time.Duration(float64(time.Since(c.origin)) * c.rate))
}
func (c *driftClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// real converts a duration on this clock to virtual time, rounding up so that a timer never fires
// before this clock has reached its deadline.
func (c *driftClock) real(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(float64(d)/c.rate)) + 1
}
func (c *driftClock) After(d time.Duration) <-chan time.Time { return time.After(c.real(d)) }
func (c *driftClock) Sleep(d time.Duration)                  { time.Sleep(c.real(d)) }
func (c *driftClock) Tick(d time.Duration) <-chan time.Time  { return time.Tick(c.real(d)) }
func (c *driftClock) NewTimer(d time.Duration) clock.Timer {
	return &driftTimer{c: c, t: time.NewTimer(c.real(d))}
}
func (c *driftClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return &driftTimer{c: c, t: time.AfterFunc(c.real(d), f)}
}
func (c *driftClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Now().Add(c.wall)
}
func (c *driftClock) jumpWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall += d
}

type driftTimer struct {
	c *driftClock
	t *time.Timer
}

func (t *driftTimer) C() <-chan time.Time        { return t.t.C }
func (t *driftTimer) Stop() bool                 { return t.t.Stop() }
func (t *driftTimer) Reset(d time.Duration) bool { return t.t.Reset(t.c.real(d)) }

// simulate runs one history of class c from seed and returns what happened. It runs inside a
// synctest bubble and returns only after every goroutine it started has ended.
func simulate(t *testing.T, c faultClass, seed uint64) history {
	var h history
	synctest.Test(t, func(t *testing.T) {
		h = simulateInBubble(t, c, seed)
	})
	return h
}

func simulateInBubble(t *testing.T, c faultClass, seed uint64) history {
	start := time.Now()
	store := memstore.New()
	rec := &recorder{}
	flog := &faultLog{}
	reg := &fencedRegister{writer: make(map[int64]int)}
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	master := rand.New(rand.NewPCG(seed, 1))
	hinter := newSimHinter(c.hints, master.Uint64(), flog)

	var wg sync.WaitGroup
	forger := store.Client(master.Uint64(), memstore.Faults{})
	wg.Go(func() { hinter.forge(ctx, forger, store) })
	for i := range c.clients {
		sim := &simClient{
			id: i, class: c, store: store, rec: rec, reg: reg, faults: flog, hinter: hinter,
			rng:  rand.New(rand.NewPCG(master.Uint64(), uint64(i))),
			seed: master.Uint64(),
		}
		wg.Go(func() { sim.run(ctx) })
	}
	if c.revoke {
		operator := store.Client(master.Uint64(), memstore.Faults{})
		rng := rand.New(rand.NewPCG(master.Uint64(), 99))
		wg.Go(func() {
			for ctx.Err() == nil {
				time.Sleep(time.Duration(2+rng.IntN(8)) * time.Second)
				if r, ok := store.Record(simLockID); ok && r.Held() && !r.Revoked {
					rctx, cancel := context.WithTimeout(ctx, time.Second)
					err := lock.Revoke(rctx, operator, simLockID, r.Token)
					cancel()
					flog.add(-1, 2*c.lease) // the revoked record keeps the lock for a lease after it is seen
					if err != nil && !errors.Is(err, lock.ErrNotHolder) && ctx.Err() == nil {
						t.Errorf("revoke token %d: %v", r.Token, err)
					}
				}
			}
		})
	}
	if c.restore {
		rng := rand.New(rand.NewPCG(master.Uint64(), 98))
		wg.Go(func() { restoreRecords(ctx, c, store, rng, flog) })
	}
	end := start.Add(c.duration) // when the clients were told to stop
	wg.Wait()
	// Let abandoned leases of crashed clients run out and their goroutines end.
	time.Sleep(4 * max(c.lease, c.contenderLease))

	h := history{class: c, claims: rec.all(), attempts: rec.allAttempts(), events: store.History(), faultLog: flog.all(),
		start: start, end: end, queue: store.QueueHistory()}
	stats := store.Stats()
	h.faults = stats.Faults() + flog.count()
	h.unheld, h.overruled = stats.UnheldConditions, stats.OverruledWrites
	h.writes, h.rejected, h.shared = reg.accepted, reg.rejected, reg.problems
	for _, e := range h.events {
		if isGrant(e) {
			h.grants++
		}
	}
	return h
}

// restoreRecords is the administrator of the restore class: every 3-8 s it deletes the owner
// record, or sets it back to a state it had before and left at least two observation lives ago,
// as a restore from a backup would.
func restoreRecords(ctx context.Context, c faultClass, store *memstore.Store, rng *rand.Rand, flog *faultLog) {
	life := 2 * (max(c.lease, c.contenderLease) + c.lease/6)
	for ctx.Err() == nil {
		time.Sleep(time.Duration(3000+rng.IntN(5000)) * time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		if rng.IntN(2) == 0 {
			store.DeleteRecord(simLockID)
			flog.add(-1, c.lease)
			continue
		}
		// The states the record left at least life ago: the Next of an event followed by a later
		// one that happened before now − life.
		events := store.History()
		var old []lock.Record
		for i := 0; i+1 < len(events); i++ {
			if !events[i].Admin && events[i].Next.Version > 0 && time.Since(events[i+1].At) >= life {
				old = append(old, events[i].Next)
			}
		}
		if len(old) == 0 {
			continue
		}
		store.Restore(simLockID, old[rng.IntN(len(old))])
		flog.add(-1, c.lease)
	}
}

// simClient is one simulated process (and its restarts).
type simClient struct {
	id     int
	class  faultClass
	store  *memstore.Store
	rec    *recorder
	reg    *fencedRegister
	rng    *rand.Rand
	seed   uint64
	faults *faultLog // faults injected outside the store
	hinter lock.Hinter
	skew   time.Duration // the process's wall-clock offset (wallSkew)
}

func (s *simClient) dur(max time.Duration) time.Duration {
	return time.Duration(s.rng.Int64N(int64(max) + 1))
}

// identity returns the client's owner identity in its pod generation pod.
func (s *simClient) identity(pod int) string {
	id := s.id
	if (s.class.sharedIdentity || s.class.copiedIdentity) && id == 1 {
		id = 0 // two live processes, one identity
	}
	return fmt.Sprintf("sim/client-%d/pod-%d", id, pod)
}

// restartSecret is the restart secret of the client's pod generation pod: every process of that
// pod can read it, no other can. Client 1 of the copied-identity class has one of its own.
func (s *simClient) restartSecret(pod int) []byte {
	return fmt.Appendf(nil, "sim-restart-secret/client-%d/pod-%d", s.id, pod)
}

// tryPoller reports whether the client polls with TryAcquire (tryPollers).
func (s *simClient) tryPoller() bool { return s.id >= s.class.clients-s.class.tryPollers }

func (s *simClient) run(ctx context.Context) {
	c := s.class
	pod := 0
	if c.wallSkew > 0 {
		s.skew = s.dur(2*c.wallSkew) - c.wallSkew
	}
	for incarnation := 1; ctx.Err() == nil; incarnation++ {
		rate := 1 + (2*s.rng.Float64()-1)*c.drift
		if c.unsafeFastClock && s.id == 1 {
			rate = 1.6
		}
		clk := &driftClock{origin: time.Now(), rate: rate, wall: s.skew}
		store := s.store.Client(s.seed+uint64(incarnation)*7919, c.faults)
		store.SetWallClock(clk.Wall) // the store reconciles its queue writes by this clock
		store.OnFault(func(d time.Duration) { s.faults.span(s.id, d) })
		lease := c.lease
		if c.contenderLease != 0 && s.id%2 == 1 {
			lease = c.contenderLease
		}
		cutter := newCutter(store, c.cutAfterRenewal, 2*c.lease, s.seed+uint64(incarnation), s.faults, s.id)
		opts := []lock.Option{
			lock.WithLease(lease), lock.WithSafetyMargin(lease / 10),
			lock.WithRequestTimeout(lease / 6), lock.WithPollInterval(100 * time.Millisecond),
			lock.WithWaiterPollInterval(500 * time.Millisecond), lock.WithQueueEntryTTL(c.entryTTL()),
			lock.WithClock(clk), lock.WithWallClock(clk.Wall), lock.WithObserver(cutter.renewed),
			lock.WithHinter(s.hinter),
		}
		if c.zeroWait && !c.sharedIdentity {
			opts = append(opts, lock.WithZeroWaitRestart(s.restartSecret(pod)))
		}
		if c.mutation != "" {
			opts = append(opts, lock.WithMutation(c.mutation))
		}
		locker, err := lock.New(store, lock.Owner{Identity: s.identity(pod), Incarnation: fmt.Sprintf("c%d-i%d", s.id, incarnation)}, opts...)
		if err != nil {
			panic(err)
		}
		switch s.incarnation(ctx, locker, store, clk) {
		case ended:
			return
		case died:
			// The process died; its identity restarts, at once (zero-wait takeover of its own
			// grant) or after a while.
			if s.rng.IntN(2) == 0 {
				time.Sleep(s.dur(2 * lease))
			}
		case replaced:
			// Cut off for good, maybe still running: a new pod with a new identity replaces it.
			pod++
		}
	}
}

// fate is how a process lifetime ended.
type fate int

const (
	ended    fate = iota // the simulation is over
	died                 // the process crashed
	replaced             // the process was cut off for good and replaced
)

// incarnation runs one process lifetime.
func (s *simClient) incarnation(ctx context.Context, locker *lock.Locker, store *memstore.Client, clk *driftClock) fate {
	c := s.class
	for ctx.Err() == nil {
		if c.partitions && s.rng.IntN(8) == 0 {
			d := s.dur(2 * c.lease)
			store.Partition(d)
			s.faults.add(s.id, d)
		}
		if c.wallJumps && s.rng.IntN(4) == 0 {
			clk.jumpWall(s.dur(2*time.Minute) - time.Minute)
			s.faults.add(s.id, 0)
		}
		var (
			lease *lock.Lease
			err   error
		)
		poller := s.tryPoller()
		try := poller || c.try && s.rng.IntN(2) == 0
		done := s.rec.attempting(s.id, locker.Owner().String(), !try, time.Until(clk.Wall()))
		if try {
			lease, err = locker.TryAcquire(ctx, simLockID)
		} else {
			stopCuts := s.cutWhileWaiting(ctx, store)
			lease, err = locker.Acquire(ctx, simLockID)
			stopCuts()
		}
		done(err == nil)
		if err != nil {
			if ctx.Err() == nil {
				if poller {
					time.Sleep(20*time.Millisecond + s.dur(80*time.Millisecond))
				} else {
					time.Sleep(s.dur(time.Second))
				}
			}
			continue
		}
		end := s.rec.acquired(s.id, lease)
		go func() { <-lease.Done(); end("Done") }()

		token := lease.Token()
		holdUntil := time.Now().Add(s.dur(c.holdFor()))
		for time.Now().Before(holdUntil) && ctx.Err() == nil {
			time.Sleep(50*time.Millisecond + s.dur(300*time.Millisecond))
			if !lease.Valid() {
				break
			}
			if c.partitions && s.rng.IntN(40) == 0 {
				// The holder loses the store while it works: it must fence itself in time.
				d := s.dur(2 * c.lease)
				store.Partition(d)
				s.faults.add(s.id, d)
			}
			if c.appPause && s.rng.IntN(20) == 0 {
				// The classic process pause between checking the lease and using it: the whole
				// process stops, including its renewals.
				d := s.dur(3 * c.lease)
				s.faults.add(s.id, d)
				store.Pause(d)
				time.Sleep(d)
			}
			s.reg.write(s.id, token)
		}
		if c.crashes && s.rng.IntN(4) == 0 {
			s.faults.add(s.id, 2*max(c.lease, c.contenderLease))
			store.Crash()
			if s.rng.IntN(2) == 0 {
				end("process died") // dead: it claims nothing from now on
				return died
			}
			// Cut off for good but alive: the application works on until the lease says stop.
			for lease.Valid() {
				s.reg.write(s.id, token)
				time.Sleep(50*time.Millisecond + s.dur(300*time.Millisecond))
			}
			<-lease.Done()
			return replaced
		}
		rctx, cancel := context.WithTimeout(context.Background(), c.lease)
		_ = lease.Release(rctx)
		cancel()
		<-lease.Done()
		if c.idle > 0 && !s.tryPoller() {
			_ = ctxtime.Sleep(ctx, s.dur(c.idle))
		}
	}
	return ended
}

// cutter cuts a holder off the store right after some successful renewals.
type cutter struct {
	store  *memstore.Client
	chance float64
	upTo   time.Duration
	faults *faultLog
	client int
	mu     sync.Mutex
	rng    *rand.Rand
}

func newCutter(store *memstore.Client, chance float64, upTo time.Duration, seed uint64, faults *faultLog, client int) *cutter {
	return &cutter{store: store, chance: chance, upTo: upTo, faults: faults, client: client, rng: rand.New(rand.NewPCG(seed, 7))}
}

func (c *cutter) renewed(e lock.Event) {
	if e.Kind != lock.EventRenewed || e.Err != nil || c.chance == 0 {
		return
	}
	c.mu.Lock()
	cut := c.rng.Float64() < c.chance
	d := time.Duration(c.rng.Int64N(int64(c.upTo)) + 1)
	c.mu.Unlock()
	if cut {
		c.store.Partition(d)
		c.faults.add(c.client, d)
	}
}

// cutWhileWaiting cuts the client off the store for 1-4 s now and then while it waits (waiterCuts),
// until the returned function is called.
func (s *simClient) cutWhileWaiting(ctx context.Context, store *memstore.Client) (stop func()) {
	if !s.class.waiterCuts {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	ttl := s.class.entryTTL()
	pause, d := time.Duration(300+s.rng.IntN(2700))*time.Millisecond, ttl+s.dur(ttl)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
			store.Partition(d)
			s.faults.add(s.id, d)
		}
	}()
	return func() { cancel(); <-done }
}

// isGrant reports whether a store write granted the lock (as opposed to renewing, revoking or
// releasing it, or an administrator's change).
func isGrant(e memstore.Event) bool {
	if e.Admin || !e.Next.Held() {
		return false
	}
	return !e.Prev.Held() || e.Prev.Owner != e.Next.Owner || e.Prev.Token != e.Next.Token
}

// interval is a claim placed in time as the world sees it: from the grant's commit in the store.
type interval struct {
	claim
	committed time.Time
}

// intervals places each claim at the commit of its grant.
func intervals(h history) ([]interval, []string) {
	var out []interval
	var problems []string
	for _, c := range h.claims {
		var committed time.Time
		for _, e := range h.events {
			if e.At.After(c.returned) {
				break
			}
			if isGrant(e) && e.Next.Owner == c.owner && e.Next.Token == c.token {
				committed = e.At
			}
		}
		if committed.IsZero() {
			problems = append(problems, fmt.Sprintf("client %d was handed token %d that no write in the store granted it", c.client, c.token))
			continue
		}
		if c.ended.IsZero() {
			problems = append(problems, fmt.Sprintf("client %d never stopped claiming token %d", c.client, c.token))
			continue
		}
		out = append(out, interval{claim: c, committed: committed})
	}
	slices.SortFunc(out, func(a, b interval) int { return a.committed.Compare(b.committed) })
	return out, problems
}

// check verifies one history and returns what is wrong with it.
func check(h history) []string {
	c := h.class
	problems := slices.Clone(h.shared)
	if c.restore {
		// Restored records hand out their tokens again, so two clients may write one token: the
		// restore procedure (docs/concepts-and-safety.md) says so. Only overlaps are checked.
		problems = nil
	}
	ivs, p := intervals(h)
	problems = append(problems, p...)
	start := time.Time{}
	if len(ivs) > 0 {
		start = ivs[0].committed
	}
	// No two claims overlap, and tokens grow with time.
	for i := 1; i < len(ivs); i++ {
		for j := range i {
			a, b := ivs[j], ivs[i]
			if b.committed.Before(a.ended) && !adminOverlap(h, a, b) {
				problems = append(problems, fmt.Sprintf("claims overlap by %v: client %d token %d [%v, %v %s] and client %d token %d [%v, ...]",
					a.ended.Sub(b.committed), a.client, a.token, a.committed.Sub(start), a.ended.Sub(start), a.how,
					b.client, b.token, b.committed.Sub(start)))
			}
			if b.token <= a.token && !c.restore {
				problems = append(problems, fmt.Sprintf("token %d granted after token %d", b.token, a.token))
			}
		}
	}
	if c.restore {
		return append(problems, checkOrder(h)...)
	}
	// The same with porcupine: each claim is a point acquire at its commit and a point end.
	var ops []porcupine.Operation
	for _, iv := range ivs {
		ops = append(ops,
			porcupine.Operation{ClientId: iv.client, Input: acquireIn{iv.client}, Output: acquireOut{iv.token},
				Call: int64(iv.committed.Sub(start)), Return: int64(iv.committed.Sub(start))},
			porcupine.Operation{ClientId: iv.client, Input: endIn{iv.client, iv.token},
				Call: int64(iv.ended.Sub(start)), Return: int64(iv.ended.Sub(start))})
	}
	if res, _ := porcupine.CheckOperationsVerbose(lockModel, ops, 30*time.Second); res != porcupine.Ok {
		problems = append(problems, fmt.Sprintf("porcupine: history of %d operations is %s: grants overlap or tokens did not grow", len(ops), res))
	}
	// Tokens in the store start at the creation floor, grow by one per grant and never go back.
	var last int64
	for i, e := range h.events {
		switch {
		case i == 0 && e.Next.Token < 1,
			i > 0 && (e.Next.Token < last || e.Next.Token > last+1),
			i > 0 && isGrant(e) && e.Next.Token != last+1:
			problems = append(problems, fmt.Sprintf("token went from %d to %d", last, e.Next.Token))
		}
		last = e.Next.Token
	}
	return append(problems, checkOrder(h)...)
}

// checkOrder runs the checkers of the class beyond safety: queue order, liveness and the cost of
// forged hints.
func checkOrder(h history) []string {
	var problems []string
	if h.class.checkHintCost && h.unheld > 0 {
		problems = append(problems, fmt.Sprintf("%d conditional writes were conditioned on a record state the lock never had: a grant sent on a hint's word", h.unheld))
	}
	if h.overruled > 0 {
		// A waiter's own writes carry its own, ever-growing timestamps, and others remove its entry
		// only as the write they saw: no removal can overrule a later write of the waiter.
		problems = append(problems, fmt.Sprintf("%d queue writes were acknowledged but overruled by a removal stamped later: a live waiter could not write its entry again", h.overruled))
	}
	if h.class.checkFIFO {
		problems = append(problems, fifo(h).violations...)
	}
	if h.class.livenessBound > 0 {
		problems = append(problems, liveness(h)...)
	}
	return problems
}

// adminOverlap reports whether claims a and b overlap only because an administrator deleted or
// restored the owner record while a was held (the restore class): the holder of a keeps its grant
// until its next renewal fails, up to a renew interval and two request timeouts later, while b's
// holder may be granted the deleted or restored record at once. That is the documented limit of
// changing the owner table behind the lock's back (docs/concepts-and-safety.md, "Restoring the keyspace").
func adminOverlap(h history, a, b interval) bool {
	if !h.class.restore {
		return false
	}
	lease := max(h.class.lease, h.class.contenderLease)
	window := lease/3 + 2*(lease/6) + h.class.lease/10 // renew interval, two request timeouts, scheduling
	for _, e := range h.events {
		// a was granted before the administrator's change and b after it (on what the change left,
		// or on a record granted from there: a new lineage of the record), while a's holder could
		// not know yet. Two grants made after the change are never excused.
		if e.Admin && e.At.After(a.committed) && !e.At.After(b.committed) && !a.ended.After(e.At.Add(window)) {
			return true
		}
	}
	return false
}

// describe summarises a history's claims for a failure message.
func describe(h history) string {
	ivs, _ := intervals(h)
	var s string
	for i, iv := range ivs {
		if i == 40 && !*simVerbose {
			s += "  ... (-sim.verbose shows the whole history)\n"
			break
		}
		s += fmt.Sprintf("  [%v, %v] client %d token %d (%s)\n", iv.committed.Sub(h.start), iv.ended.Sub(h.start), iv.client, iv.token, iv.how)
	}
	if !*simVerbose {
		return s
	}
	s += "attempts:\n"
	for _, a := range h.attempts {
		end := "running"
		if !a.end.IsZero() {
			end = a.end.Sub(h.start).String()
		}
		s += fmt.Sprintf("  client %d %s block=%v [%v, %s] granted=%v wall%+v\n", a.client, a.owner, a.block, a.start.Sub(h.start), end, a.granted, a.wallOffset)
	}
	s += "faults:\n"
	for _, f := range h.faultLog {
		s += fmt.Sprintf("  client %d [%v, %v]\n", f.client, f.from.Sub(h.start), f.to.Sub(h.start))
	}
	s += "grants with the queue at the time:\n"
	for _, e := range h.events {
		switch {
		case e.Admin:
			s += fmt.Sprintf("  %v admin: record now %+v\n", e.At.Sub(h.start), e.Next)
		case isGrant(e):
			s += fmt.Sprintf("  %v %s token %d (was %s); queue:", e.At.Sub(h.start), e.Next.Owner, e.Next.Token, e.Prev.Owner)
			for _, q := range e.Queue {
				s += fmt.Sprintf(" %s@%d(since %v)", q.Owner, q.Enqueued, q.Since.Sub(h.start))
			}
			s += "\n"
		}
	}
	return s
}
