package compare

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/test/bench/compare/oldalgo"
)

// Metric names accepted by Run.
const (
	MetricUncontended = "uncontended"
	MetricHandoff     = "handoff"
	MetricFailover    = "failover"
	MetricThroughput  = "throughput"
	MetricFairness    = "fairness"
	MetricLoad        = "load"
)

// AllMetrics lists every metric in the order Run measures them.
var AllMetrics = []string{MetricUncontended, MetricHandoff, MetricFailover, MetricThroughput, MetricFairness, MetricLoad}

// Config sizes a comparison run.
type Config struct {
	// Lease is every system's lease (whole seconds: client-go stores seconds).
	Lease time.Duration
	// UncontendedSamples is how many uncontended acquisitions each system makes, interleaved with
	// as many LWT round trips.
	UncontendedSamples int
	// HandoffPairs locks, each with two contenders handing the lock back and forth HandoffRounds
	// times, run at once per system. The waiter waits HandoffSettle plus a random part of it again
	// before the holder releases, so that it is polling in its steady state at a random phase.
	HandoffPairs, HandoffRounds int
	HandoffSettle               time.Duration
	// FailoverPairs locks per system, each with FailoverRounds kills; all systems run at once. A
	// holder is killed lease/6 plus up to lease/2 after it acquired, with a waiter polling.
	FailoverPairs, FailoverRounds int
	// Contenders are the contender counts of the throughput table; each cell measures Window after
	// Warmup.
	Contenders     []int
	Warmup, Window time.Duration
	// FairnessContenders contend for FairnessWindow (after Warmup) for the fairness table.
	FairnessContenders int
	FairnessWindow     time.Duration
	// LoadContenders contend for one lock for the load table (LoadSystems): one holds, the others
	// wait; requests are counted over LoadWindow after LoadSettle. LoadLease is the lease of the
	// systems measured there: the library's default, at which the budgets are stated.
	LoadContenders         int
	LoadLease              time.Duration
	LoadSettle, LoadWindow time.Duration
}

// FullConfig is the documented run: about 9 minutes on two cores (plus node and API server start).
func FullConfig(lease time.Duration) Config {
	return Config{
		Lease:              lease,
		UncontendedSamples: 300,
		HandoffPairs:       4, HandoffRounds: 50, HandoffSettle: 250 * time.Millisecond,
		FailoverPairs: 10, FailoverRounds: 12,
		Contenders: []int{1, 2, 4, 8, 16, 32, 64},
		Warmup:     time.Second, Window: 5 * time.Second,
		FairnessContenders: 16, FairnessWindow: 20 * time.Second,
		LoadContenders: 16, LoadLease: lock.DefaultLease, LoadSettle: 5 * time.Second, LoadWindow: 20 * time.Second,
	}
}

// QuickConfig is a reduced run (about 3 minutes) for trying things out; its p99s rest on few samples.
func QuickConfig(lease time.Duration) Config {
	return Config{
		Lease:              lease,
		UncontendedSamples: 60,
		HandoffPairs:       2, HandoffRounds: 10, HandoffSettle: 250 * time.Millisecond,
		FailoverPairs: 4, FailoverRounds: 4,
		Contenders: []int{1, 2, 4, 8, 16, 32, 64},
		Warmup:     500 * time.Millisecond, Window: 2 * time.Second,
		FairnessContenders: 16, FairnessWindow: 5 * time.Second,
		LoadContenders: 8, LoadLease: lock.DefaultLease, LoadSettle: 3 * time.Second, LoadWindow: 5 * time.Second,
	}
}

// Validate checks the sizes.
func (c Config) Validate() error {
	switch {
	case c.Lease < time.Second || c.Lease%time.Second != 0:
		return fmt.Errorf("compare: lease %v must be whole seconds, at least 1s", c.Lease)
	case c.UncontendedSamples < 1, c.HandoffPairs < 1, c.HandoffRounds < 1, c.FailoverPairs < 1,
		c.FailoverRounds < 1, c.FairnessContenders < 1, len(c.Contenders) == 0:
		return errors.New("compare: every sample count must be at least 1")
	case c.LoadContenders < 3:
		return fmt.Errorf("compare: the load table needs at least 3 contenders (holder, head, another waiter), not %d", c.LoadContenders)
	case c.Window <= 0, c.FairnessWindow <= 0, c.Warmup < 0, c.HandoffSettle < 0, c.LoadWindow <= 0, c.LoadSettle < 0, c.LoadLease <= 0:
		return errors.New("compare: windows must be positive")
	}
	for _, n := range c.Contenders {
		if n < 1 {
			return fmt.Errorf("compare: contender count %d", n)
		}
	}
	return nil
}

// Probe makes one reference request (one LWT round trip) and returns its error.
type Probe func(ctx context.Context) error

// LWTProbe returns a Probe making one lightweight transaction (Store.CompareAndSwap) per call on
// lockID, each conditioned on the previous one, as an uncontended grant would be.
func LWTProbe(store lock.Store, lockID string) Probe {
	var (
		mu   sync.Mutex
		prev lock.Record
	)
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		next := lock.Record{Owner: "probe", Token: prev.Token + 1, Version: prev.Version + 1, Lease: time.Second}
		applied, _, _, err := store.CompareAndSwap(ctx, lockID, prev, next)
		if err != nil {
			return fmt.Errorf("compare: LWT probe: %w", err)
		}
		if !applied {
			return errors.New("compare: LWT probe: conditional write not applied")
		}
		prev = next
		return nil
	}
}

// FailoverSkipper is implemented by systems whose failover equals another's; the reason is shown
// in the failover table instead of numbers.
type FailoverSkipper interface {
	SkipFailover() string
}

// Run measures the metrics (all when empty) for systems and returns the report. MetricLoad is not
// measured here but by LoadSystems, on systems at Config.LoadLease.
func Run(ctx context.Context, log logr.Logger, cfg Config, systems []System, probe Probe, metrics []string) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(metrics) == 0 {
		metrics = AllMetrics
	}
	want := map[string]bool{}
	for _, m := range metrics {
		want[m] = true
	}
	rep := newReport(cfg, systems)
	run := "r" + randomSuffix()
	if want[MetricUncontended] {
		if probe == nil {
			return nil, errors.New("compare: the uncontended metric needs the LWT probe")
		}
		if err := uncontended(ctx, log, cfg, run, systems, probe, rep); err != nil {
			return rep, err
		}
	}
	if want[MetricHandoff] {
		for i, sys := range systems {
			start := time.Now()
			s, err := Handoff(ctx, sys, fmt.Sprintf("%s-h%d", run, i), cfg.HandoffPairs, cfg.HandoffRounds, cfg.HandoffSettle)
			if err != nil {
				return rep, fmt.Errorf("compare: handoff of %s: %w", sys.Name(), err)
			}
			rep.Handoff[sys.Name()] = s
			log.Info("handoff", "system", sys.Name(), "samples", len(s), "p50", Percentile(s, 50).String(),
				"p99", Percentile(s, 99).String(), "took", time.Since(start).Round(time.Second).String())
		}
	}
	if want[MetricFailover] {
		if err := failoverAll(ctx, log, cfg, run, systems, rep); err != nil {
			return rep, err
		}
	}
	if want[MetricThroughput] {
		for i, sys := range systems {
			for _, n := range cfg.Contenders {
				c, err := Throughput(ctx, sys, fmt.Sprintf("%s-t%d-%d", run, i, n), n, cfg.Lease, cfg.Warmup, cfg.Window)
				if err != nil {
					return rep, fmt.Errorf("compare: throughput of %s with %d contenders: %w", sys.Name(), n, err)
				}
				rep.Throughput[sys.Name()] = append(rep.Throughput[sys.Name()], c)
				log.Info("throughput", "system", sys.Name(), "contenders", n, "cyclesPerSecond", fmt.Sprintf("%.1f", c.PerSecond()),
					"jain", fmt.Sprintf("%.3f", c.Jain()), "overlaps", c.Overlaps, "errors", c.Errors)
			}
		}
	}
	if want[MetricFairness] {
		for i, sys := range systems {
			c, err := Throughput(ctx, sys, fmt.Sprintf("%s-f%d", run, i), cfg.FairnessContenders, cfg.Lease, cfg.Warmup, cfg.FairnessWindow)
			if err != nil {
				return rep, fmt.Errorf("compare: fairness of %s: %w", sys.Name(), err)
			}
			rep.Fairness[sys.Name()] = c
			log.Info("fairness", "system", sys.Name(), "contenders", c.Contenders, "jain", fmt.Sprintf("%.3f", c.Jain()),
				"acquisitions", c.Cycles(), "overlaps", c.Overlaps)
		}
	}
	rep.Took = time.Since(rep.Started)
	return rep, nil
}

// uncontended interleaves one LWT round trip and one uncontended acquisition per system, so that
// load changes on the machine affect all of them alike.
func uncontended(ctx context.Context, log logr.Logger, cfg Config, run string, systems []System, probe Probe, rep *Report) error {
	contenders := make([]Contender, len(systems))
	for i, sys := range systems {
		c, err := sys.Contender(ctx, fmt.Sprintf("%s-u%d", run, i), 0)
		if err != nil {
			return err
		}
		contenders[i] = c
	}
	defer closeContenders(contenders)
	// A freshly started node answers LWTs markedly faster after a few hundred of them (JIT).
	warmup := uncontendedWarmup(cfg)
	for k := -warmup; k < cfg.UncontendedSamples; k++ {
		start := time.Now()
		if err := probe(ctx); err != nil {
			return err
		}
		if k >= 0 {
			rep.LWT = append(rep.LWT, time.Since(start))
		}
		for i, c := range contenders {
			if ap, ok := c.(APIProber); ok {
				start := time.Now()
				if err := ap.ProbeAPI(ctx); err != nil {
					return fmt.Errorf("compare: API round trip of %s: %w", systems[i].Name(), err)
				}
				if k >= 0 {
					rep.API[systems[i].Name()] = append(rep.API[systems[i].Name()], time.Since(start))
				}
			}
			start := time.Now()
			h, err := c.Acquire(ctx)
			took := time.Since(start)
			if err != nil {
				return fmt.Errorf("compare: uncontended acquire of %s: %w", systems[i].Name(), err)
			}
			if err := release(ctx, h, cfg.Lease); err != nil {
				return fmt.Errorf("compare: uncontended release of %s: %w", systems[i].Name(), err)
			}
			if k >= 0 {
				rep.Uncontended[systems[i].Name()] = append(rep.Uncontended[systems[i].Name()], took)
			}
		}
	}
	log.Info("uncontended", "samples", cfg.UncontendedSamples, "lwtP50", Percentile(rep.LWT, 50).String())
	return nil
}

// uncontendedWarmup is how many untimed rounds precede the uncontended samples.
func uncontendedWarmup(cfg Config) int { return max(20, cfg.UncontendedSamples/2) }

// release releases h, bounded by two leases and independent of ctx's end.
func release(ctx context.Context, h Holding, lease time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*lease)
	defer cancel()
	return h.Release(ctx)
}

// group runs functions concurrently and keeps the first error.
type group struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (g *group) Go(f func() error) {
	g.wg.Go(func() {
		if err := f(); err != nil {
			g.mu.Lock()
			if g.err == nil {
				g.err = err
			}
			g.mu.Unlock()
		}
	})
}

func (g *group) Wait() error {
	g.wg.Wait()
	return g.err
}

type acquired struct {
	h   Holding
	at  time.Time
	err error
}

func acquireAsync(ctx context.Context, c Contender) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		h, err := c.Acquire(ctx)
		got <- acquired{h, time.Now(), err}
	}()
	return got
}

// APIProber is implemented by contenders reached through an API (a sidecar): ProbeAPI makes one
// cheap request (a status read), so that the uncontended table can show what the transport adds.
type APIProber interface {
	ProbeAPI(ctx context.Context) error
}

// Closer is implemented by contenders that hold resources of their own (a sidecar process). The
// scenarios close every contender they made once they are done with it.
type Closer interface{ Close() }

// closeContenders closes the contenders that are Closers; nil entries are skipped.
func closeContenders(cs []Contender) {
	for _, c := range cs {
		if cl, ok := c.(Closer); ok {
			cl.Close()
		}
	}
}

// Handoff measures, on pairs locks at once, the time from the holder's Release call to the waiting
// contender's Acquire returning. A grant before the release started is a safety violation and an
// error.
func Handoff(ctx context.Context, sys System, run string, pairs, rounds int, settle time.Duration) ([]time.Duration, error) {
	var (
		g       group
		mu      sync.Mutex
		samples []time.Duration
	)
	for p := range pairs {
		g.Go(func() error {
			lockID := fmt.Sprintf("%s-%d", run, p)
			var cs [2]Contender
			defer func() { closeContenders(cs[:]) }()
			for i := range cs {
				c, err := sys.Contender(ctx, lockID, i)
				if err != nil {
					return err
				}
				cs[i] = c
			}
			h, err := cs[0].Acquire(ctx)
			if err != nil {
				return err
			}
			cur := 0
			for range rounds {
				got := acquireAsync(ctx, cs[1-cur])
				if err := ctxtime.Sleep(ctx, settle+rand.N(settle+1)); err != nil {
					return err
				}
				start := time.Now()
				if err := h.Release(ctx); err != nil {
					return fmt.Errorf("release: %w", err)
				}
				r := <-got
				if r.err != nil {
					return fmt.Errorf("waiter: %w", r.err)
				}
				if r.at.Before(start) {
					return fmt.Errorf("lock %s granted to the waiter %v before the holder released", lockID, start.Sub(r.at))
				}
				mu.Lock()
				samples = append(samples, r.at.Sub(start))
				mu.Unlock()
				h, cur = r.h, 1-cur
			}
			return h.Release(ctx)
		})
	}
	err := g.Wait()
	return samples, err
}

// FailoverResult is the failover measurement of one system.
type FailoverResult struct {
	// Samples are the times from killing the holder to the waiter's grant.
	Samples []time.Duration
	// Early counts waiters granted before the holder was killed (the holder lost its lease on its
	// own, e.g. a renewal timed out); they are not samples.
	Early int
	// Skipped is the reason the system was not measured, if it was not.
	Skipped string
}

func failoverAll(ctx context.Context, log logr.Logger, cfg Config, run string, systems []System, rep *Report) error {
	var (
		g  group
		mu sync.Mutex
	)
	start := time.Now()
	for i, sys := range systems {
		if s, ok := sys.(FailoverSkipper); ok && s.SkipFailover() != "" {
			rep.Failover[sys.Name()] = FailoverResult{Skipped: s.SkipFailover()}
			continue
		}
		g.Go(func() error {
			res, err := Failover(ctx, sys, fmt.Sprintf("%s-k%d", run, i), cfg.FailoverPairs, cfg.FailoverRounds, cfg.Lease)
			if err != nil {
				return fmt.Errorf("compare: failover of %s: %w", sys.Name(), err)
			}
			mu.Lock()
			rep.Failover[sys.Name()] = res
			mu.Unlock()
			log.Info("failover", "system", sys.Name(), "samples", len(res.Samples), "early", res.Early,
				"p50", Percentile(res.Samples, 50).String(), "p99", Percentile(res.Samples, 99).String())
			return nil
		})
	}
	err := g.Wait()
	log.Info("failover done", "took", time.Since(start).Round(time.Second).String())
	return err
}

// Failover measures, on pairs locks at once, the time from killing a holder (it stops renewing
// without releasing) to the waiting contender's grant. The holder is killed lease/6 plus up to
// lease/2 after it acquired, so the kill falls at a random phase of its renewals.
func Failover(ctx context.Context, sys System, run string, pairs, rounds int, lease time.Duration) (FailoverResult, error) {
	var (
		g   group
		mu  sync.Mutex
		res FailoverResult
	)
	for p := range pairs {
		g.Go(func() error {
			lockID := fmt.Sprintf("%s-%d", run, p)
			next := 0
			var made []Contender
			defer func() { closeContenders(made) }()
			contender := func() (Contender, error) {
				next++
				c, err := sys.Contender(ctx, lockID, next-1)
				if err == nil {
					made = append(made, c)
				}
				return c, err
			}
			c, err := contender()
			if err != nil {
				return err
			}
			h, err := c.Acquire(ctx)
			if err != nil {
				return err
			}
			for range rounds {
				w, err := contender()
				if err != nil {
					return err
				}
				got := acquireAsync(ctx, w)
				hold := lease/6 + rand.N(lease/2+1)
				select {
				case r := <-got:
					if r.err != nil {
						return fmt.Errorf("waiter: %w", r.err)
					}
					mu.Lock()
					res.Early++
					mu.Unlock()
					h.Kill()
					h = r.h
					continue
				case <-time.After(hold):
				case <-ctx.Done():
					return ctx.Err()
				}
				killed := time.Now()
				h.Kill()
				r := <-got
				if r.err != nil {
					return fmt.Errorf("waiter: %w", r.err)
				}
				mu.Lock()
				if r.at.Before(killed) {
					res.Early++
				} else {
					res.Samples = append(res.Samples, r.at.Sub(killed))
				}
				mu.Unlock()
				h = r.h
			}
			return release(ctx, h, lease)
		})
	}
	err := g.Wait()
	return res, err
}

// Cell is one throughput measurement: n contenders looping acquire+release on one lock.
type Cell struct {
	Contenders int
	Window     time.Duration
	// PerContender counts the acquisitions of each contender within the window.
	PerContender []int
	// Overlaps counts acquisitions that returned while another contender still held the lock
	// (between its Acquire returning and its Release call).
	Overlaps int64
	// Handovers counts acquisitions within the window by another contender than the previous
	// holder: how often the lock changed hands rather than being taken again by whoever just
	// released it.
	Handovers int
	// Errors counts acquisitions or releases that failed for another reason than the end of the run.
	Errors int64
	// Outcomes sums the old algorithm's attempt outcomes over warmup and window; All counts the
	// acquisitions over the same time.
	Outcomes *oldalgo.Stats
	All      int
	// Requests counts the store requests of all contenders over warmup and window, -1 when the
	// system does not count them.
	Requests int64
}

// Cycles returns the acquisitions within the window.
func (c Cell) Cycles() int {
	n := 0
	for _, k := range c.PerContender {
		n += k
	}
	return n
}

// PerSecond returns acquire+release cycles per second.
func (c Cell) PerSecond() float64 { return float64(c.Cycles()) / c.Window.Seconds() }

// HandoversPerSecond returns Handovers per second of the window.
func (c Cell) HandoversPerSecond() float64 { return float64(c.Handovers) / c.Window.Seconds() }

// Jain returns Jain's index over the per-contender acquisitions.
func (c Cell) Jain() float64 { return Jain(c.PerContender) }

// RequestsPerAcquisition is Requests ÷ All, -1 when the requests were not counted.
func (c Cell) RequestsPerAcquisition() float64 {
	if c.Requests < 0 {
		return -1
	}
	return float64(c.Requests) / float64(max(c.All, 1))
}

// Throughput runs n contenders that acquire and at once release one lock in a loop, for warmup
// and then window, and counts each contender's acquisitions within the window.
func Throughput(ctx context.Context, sys System, lockID string, n int, lease, warmup, window time.Duration) (Cell, error) {
	cs := make([]Contender, n)
	defer closeContenders(cs)
	for i := range cs {
		c, err := sys.Contender(ctx, lockID, i)
		if err != nil {
			return Cell{}, err
		}
		cs[i] = c
	}
	cell := Cell{Contenders: n, Window: window, PerContender: make([]int, n)}
	var before []oldalgo.Stats
	requests := func() int64 {
		n := int64(-1)
		for _, c := range cs {
			if rc, ok := c.(RequestCounter); ok {
				n = max(n, 0) + rc.Requests()
			}
		}
		return n
	}
	reqBefore := requests()
	for _, c := range cs {
		if oc, ok := c.(OutcomeCounter); ok {
			before = append(before, oc.Outcomes())
		}
	}
	var (
		holders  atomic.Int32
		overlaps atomic.Int64
		errs     atomic.Int64
		all      atomic.Int64
		last     atomic.Int64 // 1 + index of the latest acquirer
		handed   atomic.Int64
		wg       sync.WaitGroup
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := time.Now().Add(warmup)
	to := from.Add(window)
	for i, c := range cs {
		wg.Go(func() {
			for runCtx.Err() == nil {
				h, err := c.Acquire(runCtx)
				if err != nil {
					if runCtx.Err() == nil {
						errs.Add(1)
						_ = ctxtime.Sleep(runCtx, 50*time.Millisecond)
					}
					continue
				}
				at := time.Now()
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				all.Add(1)
				prev := last.Swap(int64(i + 1))
				if !at.Before(from) && at.Before(to) {
					cell.PerContender[i]++ // only this goroutine writes element i
					if prev != int64(i+1) {
						handed.Add(1)
					}
				}
				holders.Add(-1)
				if err := release(runCtx, h, lease); err != nil {
					errs.Add(1)
				}
			}
		})
	}
	if err := ctxtime.Sleep(ctx, time.Until(to)); err != nil {
		cancel()
		wg.Wait()
		return cell, err
	}
	cancel()
	wg.Wait()
	cell.Overlaps, cell.Errors, cell.All, cell.Handovers = overlaps.Load(), errs.Load(), int(all.Load()), int(handed.Load())
	cell.Requests = -1
	if reqBefore >= 0 {
		cell.Requests = requests() - reqBefore
	}
	if len(before) > 0 {
		var sum oldalgo.Stats
		k := 0
		for _, c := range cs {
			if oc, ok := c.(OutcomeCounter); ok {
				now, was := oc.Outcomes(), before[k]
				k++
				sum.Success += now.Success - was.Success
				sum.AnotherThreadIsOwner += now.AnotherThreadIsOwner - was.AnotherThreadIsOwner
				sum.ConcurrentAttempt += now.ConcurrentAttempt - was.ConcurrentAttempt
				sum.Errors += now.Errors - was.Errors
			}
		}
		cell.Outcomes = &sum
	}
	return cell, nil
}
