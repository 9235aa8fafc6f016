package compare

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/ctxtime"
)

// ScaleConfig is one run of the scale measurement: Locks locks with Contenders contenders each,
// all at once on one system.
type ScaleConfig struct {
	Locks      int
	Contenders int // per lock: a holder, the head of its queue, and Contenders-2 other waiters; at least 3
	Lease      time.Duration
	// Settle is how long the queues run before the window opens; Window is the measured time.
	Settle, Window time.Duration
	// HandOffs and Failovers are how many locks (each used once, no lock for both) measure a
	// hand-off (the holder releases) and a crash failover (the holder dies) after the window.
	HandOffs, Failovers int
	// InFlight caps the acquisitions that run at once while the holders take their locks (64 when
	// zero), so that a thousand locks do not reach the store in one burst.
	InFlight int
	// Requests, when set, returns the cumulative count of requests the system's server has seen
	// (Cassandra's per-connection counters, the API server's request counter): Scale reports its
	// rate over the window beside the contenders' own counts.
	Requests func(ctx context.Context) (int64, error)
	// CPU, when set, returns the cumulative CPU time of the server's processes; IdleCores is what
	// they use with no lock client running (measured by the caller), which CPUPerThousand leaves out.
	CPU       func() (time.Duration, error)
	IdleCores float64
	// Operator, when set, samples the operator that reconciles the run's DistributedLocks at
	// both ends of the window: Scale reports its rates and its memory at the window's end.
	Operator func(ctx context.Context) (OperatorSample, error)
	// Connections, when set, returns the client connections each server node has, which Scale
	// reads at the window's end.
	Connections func(ctx context.Context) ([]int, error)
}

// OperatorSample is the operator's counters at one instant: its process's CPU time, its resident
// memory and Go heap in use, the API requests it made that write (POST, PUT, PATCH, DELETE: its
// own leader-election Lease included), the DistributedLock status writes the API server served,
// and the operator's lock store reads.
type OperatorSample struct {
	CPU                                 time.Duration
	RSS, Heap                           int64 // bytes
	APIWrites, StatusWrites, StoreReads int64
}

// OperatorLoad is what the operator cost over a scale run's window: cores, memory at its end
// (bytes), and rates per second.
type OperatorLoad struct {
	Cores                                             float64
	RSS, Heap                                         int64
	APIWrites, StatusWrites, StoreReads, ReadsPerLock float64
}

// RoleLoad is the store load of one role, in requests per second per contender: the mean over
// the locks and the highest single contender.
type RoleLoad struct {
	Mean, Max float64
}

// ScaleResult is what one ScaleConfig run measured. Loads are -1 when the system's contenders do
// not count their requests (client-go's election counts none: its Server figure is the API
// server's), and Server figures are -1 when the config had no Requests or CPU.
type ScaleResult struct {
	System             string
	Locks, Contenders  int
	Lease, Window      time.Duration
	Holder, Head, Rest RoleLoad
	// Client is the contenders' own count, in requests per second per lock, every role.
	Client float64
	// Server is the server's count over the window in requests per second, all locks together;
	// ServerPerLock divides it by Locks.
	Server, ServerPerLock float64
	// ServerCores is the server's CPU time over the window per second of it, IdleCores what it
	// uses at rest (ScaleConfig.IdleCores); CPUPerThousand is its CPU seconds above idle per 1,000
	// server requests.
	ServerCores, IdleCores, CPUPerThousand float64
	// HandOff are the times from a holder's Release call to a waiter's grant (the head's, in a
	// queue); Failover from a holder's death (its store cut off) to a waiter's grant. EarlyFailovers counts heads granted
	// before their holder was killed (the holder lost its lease on its own): not samples.
	HandOff, Failover []time.Duration
	EarlyFailovers    int
	// Lost counts holders that lost their lock on their own before their hand-off or failover (a
	// renewal did not reach the store in time: the store could not keep up); their locks are not
	// sampled.
	Lost int
	// SetUp is how long the holders and queues took to form.
	SetUp time.Duration
	// Operator is the cost of the operator reconciling the run's DistributedLocks (nil: none ran).
	Operator *OperatorLoad `json:",omitempty"`
	// Connections are the client connections of each server node at the window's end (nil: not
	// counted).
	Connections []int `json:",omitempty"`
}

// scaleLock is one lock of a scale run: its contenders, the holder's Holding, and the waiters'
// grants as they come (pending counts the waiters that have not answered yet). A system without a
// queue (client-go's election) may grant any waiter, so hand-offs take the first grant, not the
// head's.
type scaleLock struct {
	id          string
	contenders  []Contender
	counters    []RequestCounter // nil when the system does not count
	holding     Holding
	grants      chan acquired // buffered: one per waiter
	pending     int
	released    bool
	handedOffTo Holding
}

// wait starts contender i's acquisition on ctx; its result arrives on grants.
func (sl *scaleLock) wait(ctx context.Context, i int) {
	sl.pending++
	go func() {
		h, err := sl.contenders[i].Acquire(ctx)
		sl.grants <- acquired{h, time.Now(), err}
	}()
}

// next returns the next waiter's answer.
func (sl *scaleLock) next() acquired {
	sl.pending--
	return <-sl.grants
}

// Scale runs cfg on sys: it forms every lock's holder and queue, lets them run for cfg.Settle,
// measures cfg.Window, then measures hand-offs and crash failovers on separate locks and releases
// everything. A waiter granted while its holder still held is a safety violation and an error.
func Scale(ctx context.Context, sys System, run string, cfg ScaleConfig) (ScaleResult, error) {
	if cfg.Contenders < 3 {
		return ScaleResult{}, fmt.Errorf("compare: scale needs a holder, a head and another waiter per lock, not %d contenders", cfg.Contenders)
	}
	if cfg.Locks < 1 || cfg.HandOffs+cfg.Failovers > cfg.Locks {
		return ScaleResult{}, fmt.Errorf("compare: scale over %d locks cannot sample %d hand-offs and %d failovers", cfg.Locks, cfg.HandOffs, cfg.Failovers)
	}
	inFlight := cfg.InFlight
	if inFlight <= 0 {
		inFlight = 64
	}
	res := ScaleResult{System: sys.Name(), Locks: cfg.Locks, Contenders: cfg.Contenders, Lease: cfg.Lease, Window: cfg.Window}
	locks := make([]*scaleLock, cfg.Locks)
	counting := true
	for l := range locks {
		sl := &scaleLock{id: ScaleLockID(run, l), grants: make(chan acquired, cfg.Contenders)}
		locks[l] = sl
		for i := range cfg.Contenders {
			c, err := sys.Contender(ctx, sl.id, i)
			if err != nil {
				cleanUpScale(ctx, locks, cfg.Lease) // nothing waits or holds yet
				return res, err
			}
			sl.contenders = append(sl.contenders, c)
			rc, ok := c.(RequestCounter)
			counting = counting && ok
			sl.counters = append(sl.counters, rc)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		cleanUpScale(ctx, locks, cfg.Lease)
	}()

	// The holders, at most inFlight at a time.
	start := time.Now()
	var (
		g   group
		sem = make(chan struct{}, inFlight)
	)
	for _, sl := range locks {
		g.Go(func() error {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			defer func() { <-sem }()
			h, err := sl.contenders[0].Acquire(ctx)
			if err != nil {
				return fmt.Errorf("holder of %s: %w", sl.id, err)
			}
			sl.holding = h
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	// The waiters, one rank at a time: queue order is arrival order, and a rank's enqueues must
	// land before the next rank's start. An enqueue takes milliseconds; a thousand at once take
	// longer, hence a pause that grows with the number of locks.
	gap := max(200*time.Millisecond, time.Duration(cfg.Locks)*2*time.Millisecond)
	for i := 1; i < cfg.Contenders; i++ {
		for _, sl := range locks {
			sl.wait(wctx, i)
		}
		if err := ctxtime.Sleep(ctx, gap); err != nil {
			return res, err
		}
	}
	res.SetUp = time.Since(start)
	if err := ctxtime.Sleep(ctx, cfg.Settle); err != nil {
		return res, err
	}

	// The window.
	before := snapshot(ctx, locks, cfg)
	if err := ctxtime.Sleep(ctx, cfg.Window); err != nil {
		return res, err
	}
	after := snapshot(ctx, locks, cfg)
	if err := errors.Join(before.err, after.err); err != nil {
		return res, err
	}
	if cfg.Connections != nil {
		conns, err := cfg.Connections(ctx)
		if err != nil {
			return res, fmt.Errorf("server connections: %w", err)
		}
		res.Connections = conns
	}
	// A waiter granted by now means its holder lost the lock on its own: a renewal did not reach
	// the store in time (an overloaded store), which the lock client reports to its holder. Such
	// a lock is counted, and sampled no further.
	var steady []*scaleLock
	for _, sl := range locks {
		select {
		case r := <-sl.grants:
			sl.pending--
			if r.err != nil {
				return res, fmt.Errorf("lock %s: a waiter: %w", sl.id, r.err)
			}
			sl.handedOffTo, sl.released = r.h, true
			_ = release(ctx, sl.holding, cfg.Lease) // it has lost the lock; this ends its client's renewals
			res.Lost++
		default:
			steady = append(steady, sl)
		}
	}
	res.fillLoads(locks, before, after, cfg, counting)
	handOffs := steady[:min(cfg.HandOffs, len(steady))]
	failovers := steady[len(handOffs):min(cfg.HandOffs+cfg.Failovers, len(steady))]

	// Hand-offs, one lock after another so that each sample is a hand-off and not a burst.
	for _, sl := range handOffs {
		t0 := time.Now()
		if err := sl.holding.Release(ctx); err != nil {
			return res, fmt.Errorf("release of %s: %w", sl.id, err)
		}
		sl.released = true
		r := sl.next()
		if r.err != nil {
			return res, fmt.Errorf("waiter of %s after the release: %w", sl.id, r.err)
		}
		sl.handedOffTo = r.h
		if r.at.Before(t0) { // its holder had lost the lock already
			res.Lost++
			continue
		}
		res.HandOff = append(res.HandOff, r.at.Sub(t0))
	}
	// Crash failovers, all at once: each takes about a lease.
	var mu sync.Mutex
	for _, sl := range failovers {
		g.Go(func() error {
			t0 := time.Now()
			sl.holding.Kill()
			sl.released = true
			r := sl.next()
			if r.err != nil {
				return fmt.Errorf("waiter of %s after the holder died: %w", sl.id, r.err)
			}
			sl.handedOffTo = r.h
			mu.Lock()
			defer mu.Unlock()
			if r.at.Before(t0) {
				res.EarlyFailovers++
			} else {
				res.Failover = append(res.Failover, r.at.Sub(t0))
			}
			return nil
		})
	}
	return res, g.Wait()
}

// ScaleLockID is the ID Scale gives lock l of run: "<run>-<l>".
func ScaleLockID(run string, l int) string { return fmt.Sprintf("%s-%d", run, l) }

// scaleSnapshot is the counters at one instant of a scale run.
type scaleSnapshot struct {
	at       time.Time
	clients  [][]int64 // [lock][contender]
	requests int64
	cpu      time.Duration
	operator OperatorSample
	err      error
}

func snapshot(ctx context.Context, locks []*scaleLock, cfg ScaleConfig) scaleSnapshot {
	s := scaleSnapshot{at: time.Now(), clients: make([][]int64, len(locks))}
	for l, sl := range locks {
		s.clients[l] = make([]int64, len(sl.counters))
		for i, rc := range sl.counters {
			if rc != nil {
				s.clients[l][i] = rc.Requests()
			}
		}
	}
	if cfg.Requests != nil {
		n, err := cfg.Requests(ctx)
		if err != nil {
			s.err = errors.Join(s.err, fmt.Errorf("server request count: %w", err))
		}
		s.requests = n
	}
	if cfg.CPU != nil {
		d, err := cfg.CPU()
		if err != nil {
			s.err = errors.Join(s.err, fmt.Errorf("server CPU time: %w", err))
		}
		s.cpu = d
	}
	if cfg.Operator != nil {
		o, err := cfg.Operator(ctx)
		if err != nil {
			s.err = errors.Join(s.err, fmt.Errorf("operator: %w", err))
		}
		s.operator = o
	}
	return s
}

// fillLoads sets the loads of r from two snapshots around the window.
func (r *ScaleResult) fillLoads(locks []*scaleLock, before, after scaleSnapshot, cfg ScaleConfig, counting bool) {
	window := after.at.Sub(before.at).Seconds()
	r.Holder, r.Head, r.Rest = RoleLoad{-1, -1}, RoleLoad{-1, -1}, RoleLoad{-1, -1}
	r.Client, r.Server, r.ServerPerLock, r.ServerCores, r.IdleCores, r.CPUPerThousand = -1, -1, -1, -1, -1, -1
	if counting {
		var roles [3]struct {
			sum, max float64
			n        int
		}
		var total float64
		for l := range locks {
			for i := range locks[l].counters {
				rate := float64(after.clients[l][i]-before.clients[l][i]) / window
				role := min(i, 2)
				roles[role].sum += rate
				roles[role].max = max(roles[role].max, rate)
				roles[role].n++
				total += rate
			}
		}
		load := func(k int) RoleLoad { return RoleLoad{roles[k].sum / float64(roles[k].n), roles[k].max} }
		r.Holder, r.Head, r.Rest = load(0), load(1), load(2)
		r.Client = total / float64(len(locks))
	}
	if cfg.Requests != nil {
		r.Server = float64(after.requests-before.requests) / window
		r.ServerPerLock = r.Server / float64(len(locks))
	}
	if cfg.CPU != nil {
		cpu := (after.cpu - before.cpu).Seconds()
		r.ServerCores, r.IdleCores = cpu/window, cfg.IdleCores
		if n := after.requests - before.requests; cfg.Requests != nil && n > 0 {
			r.CPUPerThousand = max(0, cpu-cfg.IdleCores*window) / float64(n) * 1000
		}
	}
	if cfg.Operator != nil {
		a, b := before.operator, after.operator
		per := func(x, y int64) float64 { return float64(y-x) / window }
		r.Operator = &OperatorLoad{Cores: (b.CPU - a.CPU).Seconds() / window, RSS: b.RSS, Heap: b.Heap,
			APIWrites: per(a.APIWrites, b.APIWrites), StatusWrites: per(a.StatusWrites, b.StatusWrites),
			StoreReads: per(a.StoreReads, b.StoreReads)}
		r.Operator.ReadsPerLock = r.Operator.StoreReads / float64(len(locks))
	}
}

// cleanUpScale waits for every waiter, whose acquisition's context the caller has cancelled,
// releases whatever any contender holds (each within two leases) and closes the contenders.
func cleanUpScale(ctx context.Context, locks []*scaleLock, lease time.Duration) {
	for _, sl := range locks {
		if sl == nil {
			continue
		}
		for sl.pending > 0 {
			// A waiter granted before the cancel (the next in line of a released lock) holds.
			if r := sl.next(); r.err == nil {
				_ = release(ctx, r.h, lease)
			}
		}
		if sl.handedOffTo != nil {
			_ = release(ctx, sl.handedOffTo, lease)
		}
		if sl.holding != nil && !sl.released {
			_ = release(ctx, sl.holding, lease)
		}
		closeContenders(sl.contenders)
	}
}
