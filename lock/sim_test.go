package lock_test

// Deterministic simulation harness: simulated clients run the real Locker against memstore inside
// a testing/synctest bubble (virtual time), with faults drawn from seeded sources. Each history is
// checked with porcupine against a lock model and with a fenced register.

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
	// partitions cuts clients off the store for up to two leases at a time.
	partitions bool
	// crashes kills holders without release; half of them restart at once with the same identity.
	crashes bool
	// revoke lets an operator revoke the current holder now and then.
	revoke bool
	// appPause pauses the application between checking its lease and writing, past the lease.
	appPause bool
	// try makes half of the attempts TryAcquire.
	try bool
	// contenderLease, if set, is the lease of odd-numbered clients (mixed configurations).
	contenderLease time.Duration
	// unsafeFastClock gives client 1 a clock running 60% fast: far beyond the safety margin. Only
	// for checking that the checker catches the resulting overlaps.
	unsafeFastClock bool
}

// history is what one simulated run produced.
type history struct {
	ops      []porcupine.Operation
	grants   int
	writes   int
	rejected int
	faults   int
	shared   []string // violations seen by the fenced register
	events   []memstore.Event
	clientID map[string]int
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
			return fmt.Sprintf("client %d acquire → token %d", in.client, output.(acquireOut).token)
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

// recorder collects porcupine operations in virtual time.
type recorder struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (r *recorder) add(client int, in, out any, call, ret time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{
		ClientId: client, Input: in, Output: out,
		Call: int64(call.Sub(r.start)), Return: int64(ret.Sub(r.start)),
	})
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
		f.problems = append(f.problems, fmt.Sprintf("token %d written by clients %d and %d", token, w, client))
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
	rec := &recorder{start: time.Now()}
	var simFaults atomic.Int64
	reg := &fencedRegister{writer: make(map[int64]int)}
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	master := rand.New(rand.NewPCG(seed, 1))
	clientID := make(map[string]int)

	var wg sync.WaitGroup
	for i := range c.clients {
		identity := fmt.Sprintf("sim/client-%d", i)
		clientID[identity] = i
		sim := &simClient{
			id: i, identity: identity, class: c, store: store, rec: rec, reg: reg, faults: &simFaults,
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

	var h history
	h.ops = rec.ops
	h.events = store.History()
	h.clientID = clientID
	h.faults = store.Stats().Faults() + int(simFaults.Load())
	_ = t
	h.writes, h.rejected, h.shared = reg.accepted, reg.rejected, reg.problems
	for _, e := range h.events {
		if e.Next.Token > e.Prev.Token {
			h.grants++
		}
	}
	return h
}

// simClient is one simulated process (and its restarts).
type simClient struct {
	id       int
	identity string
	class    faultClass
	store    *memstore.Store
	rec      *recorder
	reg      *fencedRegister
	rng      *rand.Rand
	seed     uint64
	faults   *atomic.Int64 // faults injected outside the store
}

func (s *simClient) dur(max time.Duration) time.Duration {
	return time.Duration(s.rng.Int64N(int64(max) + 1))
}

func (s *simClient) run(ctx context.Context) {
	c := s.class
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
		locker, err := lock.New(store, lock.Owner{Identity: s.identity, Incarnation: fmt.Sprintf("i%d", incarnation)},
			lock.WithLease(lease), lock.WithSafetyMargin(lease/10),
			lock.WithRequestTimeout(lease/6), lock.WithPollInterval(100*time.Millisecond),
			lock.WithWaiterPollInterval(500*time.Millisecond), lock.WithQueueEntryTTL(2*time.Second),
			lock.WithClock(clk), lock.WithWallClock(clk.Wall))
		if err != nil {
			panic(err)
		}
		if !s.incarnation(ctx, locker, store, clk) {
			return
		}
		// Crashed: restart at once (zero-wait takeover of our own grant) or after a while.
		if s.rng.IntN(2) == 0 {
			time.Sleep(s.dur(2 * lease))
		}
	}
}

// incarnation runs one process lifetime; it reports whether the process crashed.
func (s *simClient) incarnation(ctx context.Context, locker *lock.Locker, store *memstore.Client, clk *driftClock) bool {
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
		call := time.Now()
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
		token := lease.Token()
		s.rec.add(s.id, acquireIn{s.id}, acquireOut{token}, call, time.Now())
		var once sync.Once
		end := func() {
			once.Do(func() {
				now := time.Now()
				s.rec.add(s.id, endIn{s.id, token}, nil, now, now.Add(time.Nanosecond))
			})
		}
		go func() { <-lease.Done(); end() }()

		holdUntil := time.Now().Add(s.dur(2 * c.lease))
		for time.Now().Before(holdUntil) && ctx.Err() == nil {
			time.Sleep(50*time.Millisecond + s.dur(300*time.Millisecond))
			if !lease.Valid() {
				break
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
			end()
			store.Crash()
			return true
		}
		rctx, cancel := context.WithTimeout(context.Background(), c.lease)
		_ = lease.Release(rctx)
		cancel()
		end()
	}
	return false
}

// check verifies one history and returns what is wrong with it.
func check(h history) []string {
	var problems []string
	problems = append(problems, h.shared...)
	res, _ := porcupine.CheckOperationsVerbose(lockModel, h.ops, 30*time.Second)
	if res != porcupine.Ok {
		problems = append(problems, fmt.Sprintf("porcupine: history of %d operations is %s: grants overlap or tokens did not grow", len(h.ops), res))
	}
	// Tokens in the store grow by one per grant and never go back.
	var last int64
	for _, e := range h.events {
		if e.Next.Token < last || e.Next.Token > last+1 {
			problems = append(problems, fmt.Sprintf("token went from %d to %d", last, e.Next.Token))
		}
		last = e.Next.Token
	}
	return problems
}

// describe summarises a history's operations for a failure message.
func describe(h history) string {
	ops := slices.Clone(h.ops)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	var s string
	for i, op := range ops {
		if i == 40 {
			s += "  ...\n"
			break
		}
		s += fmt.Sprintf("  [%v, %v] %s\n", time.Duration(op.Call), time.Duration(op.Return), lockModel.DescribeOperation(op.Input, op.Output))
	}
	return s
}
