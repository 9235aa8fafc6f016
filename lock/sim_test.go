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
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"k8s.io/utils/clock"

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
	// mutation makes every client a deliberately unsafe variant of the lock (mutation test only).
	mutation string
}

// history is what one simulated run produced.
type history struct {
	claims   []claim
	grants   int
	writes   int
	rejected int
	faults   int
	shared   []string // violations seen by the fenced register
	events   []memstore.Event
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

// recorder collects claims in virtual time.
type recorder struct {
	mu     sync.Mutex
	claims []*claim
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
	out := make([]claim, len(r.claims))
	for i, c := range r.claims {
		out[i] = *c
	}
	return out
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
	store := memstore.New()
	rec := &recorder{}
	var simFaults atomic.Int64
	reg := &fencedRegister{writer: make(map[int64]int)}
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	master := rand.New(rand.NewPCG(seed, 1))
	hinter := newSimHinter(c.hints, master.Uint64(), &simFaults)

	var wg sync.WaitGroup
	forger := store.Client(master.Uint64(), memstore.Faults{})
	wg.Go(func() { hinter.forge(ctx, forger) })
	for i := range c.clients {
		sim := &simClient{
			id: i, class: c, store: store, rec: rec, reg: reg, faults: &simFaults, hinter: hinter,
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
					simFaults.Add(1)
					if err != nil && !errors.Is(err, lock.ErrNotHolder) && ctx.Err() == nil {
						t.Errorf("revoke token %d: %v", r.Token, err)
					}
				}
			}
		})
	}
	wg.Wait()
	// Let abandoned leases of crashed clients run out and their goroutines end.
	time.Sleep(4 * max(c.lease, c.contenderLease))

	h := history{claims: rec.all(), events: store.History()}
	h.faults = store.Stats().Faults() + int(simFaults.Load())
	h.writes, h.rejected, h.shared = reg.accepted, reg.rejected, reg.problems
	for _, e := range h.events {
		if isGrant(e) {
			h.grants++
		}
	}
	return h
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
	faults *atomic.Int64 // faults injected outside the store
	hinter lock.Hinter
}

func (s *simClient) dur(max time.Duration) time.Duration {
	return time.Duration(s.rng.Int64N(int64(max) + 1))
}

// identity returns the client's owner identity in its pod generation pod.
func (s *simClient) identity(pod int) string {
	id := s.id
	if s.class.sharedIdentity && id == 1 {
		id = 0 // two live processes, one identity
	}
	return fmt.Sprintf("sim/client-%d/pod-%d", id, pod)
}

func (s *simClient) run(ctx context.Context) {
	c := s.class
	pod := 0
	for incarnation := 1; ctx.Err() == nil; incarnation++ {
		rate := 1 + (2*s.rng.Float64()-1)*c.drift
		if c.unsafeFastClock && s.id == 1 {
			rate = 1.6
		}
		clk := &driftClock{origin: time.Now(), rate: rate}
		store := s.store.Client(s.seed+uint64(incarnation)*7919, c.faults)
		lease := c.lease
		if c.contenderLease != 0 && s.id%2 == 1 {
			lease = c.contenderLease
		}
		cutter := newCutter(store, c.cutAfterRenewal, 2*c.lease, s.seed+uint64(incarnation), s.faults)
		opts := []lock.Option{
			lock.WithLease(lease), lock.WithSafetyMargin(lease / 10),
			lock.WithRequestTimeout(lease / 6), lock.WithPollInterval(100 * time.Millisecond),
			lock.WithWaiterPollInterval(500 * time.Millisecond), lock.WithQueueEntryTTL(2 * time.Second),
			lock.WithClock(clk), lock.WithWallClock(clk.Wall), lock.WithObserver(cutter.renewed),
			lock.WithHinter(s.hinter),
		}
		if c.zeroWait && !c.sharedIdentity {
			opts = append(opts, lock.WithZeroWaitRestart())
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
			store.Partition(s.dur(2 * c.lease))
			s.faults.Add(1)
		}
		if c.wallJumps && s.rng.IntN(4) == 0 {
			clk.jumpWall(s.dur(2*time.Minute) - time.Minute)
			s.faults.Add(1)
		}
		var (
			lease *lock.Lease
			err   error
		)
		if c.try && s.rng.IntN(2) == 0 {
			lease, err = locker.TryAcquire(ctx, simLockID)
		} else {
			lease, err = locker.Acquire(ctx, simLockID)
		}
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(s.dur(time.Second))
			}
			continue
		}
		end := s.rec.acquired(s.id, lease)
		go func() { <-lease.Done(); end("Done") }()

		token := lease.Token()
		holdUntil := time.Now().Add(s.dur(2 * c.lease))
		for time.Now().Before(holdUntil) && ctx.Err() == nil {
			time.Sleep(50*time.Millisecond + s.dur(300*time.Millisecond))
			if !lease.Valid() {
				break
			}
			if c.partitions && s.rng.IntN(40) == 0 {
				// The holder loses the store while it works: it must fence itself in time.
				store.Partition(s.dur(2 * c.lease))
				s.faults.Add(1)
			}
			if c.appPause && s.rng.IntN(20) == 0 {
				// The classic process pause between checking the lease and using it: the whole
				// process stops, including its renewals.
				d := s.dur(3 * c.lease)
				store.Pause(d)
				time.Sleep(d)
			}
			s.reg.write(s.id, token)
		}
		if c.crashes && s.rng.IntN(4) == 0 {
			s.faults.Add(1)
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
	}
	return ended
}

// cutter cuts a holder off the store right after some successful renewals.
type cutter struct {
	store  *memstore.Client
	chance float64
	upTo   time.Duration
	faults *atomic.Int64
	mu     sync.Mutex
	rng    *rand.Rand
}

func newCutter(store *memstore.Client, chance float64, upTo time.Duration, seed uint64, faults *atomic.Int64) *cutter {
	return &cutter{store: store, chance: chance, upTo: upTo, faults: faults, rng: rand.New(rand.NewPCG(seed, 7))}
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
		c.faults.Add(1)
	}
}

// isGrant reports whether a store write granted the lock (as opposed to renewing, revoking or
// releasing it).
func isGrant(e memstore.Event) bool {
	if !e.Next.Held() {
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
	problems := slices.Clone(h.shared)
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
			if b.committed.Before(a.ended) {
				problems = append(problems, fmt.Sprintf("claims overlap by %v: client %d token %d [%v, %v %s] and client %d token %d [%v, ...]",
					a.ended.Sub(b.committed), a.client, a.token, a.committed.Sub(start), a.ended.Sub(start), a.how,
					b.client, b.token, b.committed.Sub(start)))
			}
			if b.token <= a.token {
				problems = append(problems, fmt.Sprintf("token %d granted after token %d", b.token, a.token))
			}
		}
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
	return problems
}

// describe summarises a history's claims for a failure message.
func describe(h history) string {
	ivs, _ := intervals(h)
	var s string
	for i, iv := range ivs {
		if i == 40 {
			s += "  ...\n"
			break
		}
		start := ivs[0].committed
		s += fmt.Sprintf("  [%v, %v] client %d token %d (%s)\n", iv.committed.Sub(start), iv.ended.Sub(start), iv.client, iv.token, iv.how)
	}
	return s
}
