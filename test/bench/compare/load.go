package compare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/internal/ctxtime"
)

// Store load budgets per role, in requests per second (docs/design.md, Targets): they are stated
// at the library's default lease, so the load table runs its systems at that lease.
const (
	TargetHolderLoad = 1.0
	TargetHeadLoad   = 10.0
	TargetWaiterLoad = 2.0
)

// LoadResult is the store load of one system's contenders on one lock by role, in requests per
// second over the window: the holder, the head of the queue, and every other waiter.
type LoadResult struct {
	Lease  time.Duration
	Window time.Duration
	Holder float64
	Head   float64
	Others []float64
}

// MaxOthers is the highest load of a waiter behind the head.
func (r LoadResult) MaxOthers() float64 {
	m := 0.0
	for _, v := range r.Others {
		m = max(m, v)
	}
	return m
}

// Met reports whether every role is within its budget.
func (r LoadResult) Met() bool {
	return r.Holder <= TargetHolderLoad && r.Head <= TargetHeadLoad && r.MaxOthers() <= TargetWaiterLoad
}

// LoadSystems measures Load for every system at once (each on its own lock) and stores the
// results in rep. The systems must run at cfg.LoadLease, and their contenders must count their
// requests (RequestCounter): baton's.
func LoadSystems(ctx context.Context, log logr.Logger, cfg Config, systems []System, rep *Report) error {
	var g group
	results := make([]LoadResult, len(systems))
	run := "r" + randomSuffix()
	start := time.Now()
	for i, sys := range systems {
		g.Go(func() error {
			res, err := Load(ctx, sys, fmt.Sprintf("%s-l%d", run, i), cfg.LoadContenders, cfg.LoadLease, cfg.LoadSettle, cfg.LoadWindow)
			if err != nil {
				return fmt.Errorf("compare: load of %s: %w", sys.Name(), err)
			}
			results[i] = res
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, sys := range systems {
		r := results[i]
		rep.Load[sys.Name()] = r
		log.Info("load", "system", sys.Name(), "holder", fmt.Sprintf("%.2f", r.Holder), "head", fmt.Sprintf("%.2f", r.Head),
			"othersMax", fmt.Sprintf("%.2f", r.MaxOthers()))
	}
	log.Info("load done", "took", time.Since(start).Round(time.Second).String())
	rep.Took = time.Since(rep.Started)
	return nil
}

// Load measures the store requests per second of each role on one lock: contender 0 acquires and
// holds (lease is the system's); contenders 1 to n-1 then ask in turn, a queue poll apart so that they queue in that
// order (contender 1 is the head). After settle, the window counts every contender's requests.
// Then the waiters give up and the holder releases.
func Load(ctx context.Context, sys System, lockID string, n int, lease, settle, window time.Duration) (LoadResult, error) {
	if n < 3 {
		return LoadResult{}, fmt.Errorf("compare: load needs a holder, a head and another waiter, not %d contenders", n)
	}
	var made []Contender
	defer func() { closeContenders(made) }()
	counters := make([]RequestCounter, n)
	for i := range n {
		c, err := sys.Contender(ctx, lockID, i)
		if err != nil {
			return LoadResult{}, err
		}
		made = append(made, c)
		rc, ok := c.(RequestCounter)
		if !ok {
			return LoadResult{}, errors.New("compare: the load table needs contenders that count their store requests")
		}
		counters[i] = rc
	}
	holding, err := made[0].Acquire(ctx)
	if err != nil {
		return LoadResult{}, fmt.Errorf("holder: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make([]<-chan acquired, 0, n-1)
	for _, c := range made[1:] {
		waiting = append(waiting, acquireAsync(wctx, c))
		// Queue order is arrival order; an enqueue takes milliseconds.
		if err := ctxtime.Sleep(ctx, 200*time.Millisecond); err != nil {
			return LoadResult{}, err
		}
	}
	if err := ctxtime.Sleep(ctx, settle); err != nil {
		return LoadResult{}, err
	}
	before := make([]int64, n)
	for i, rc := range counters {
		before[i] = rc.Requests()
	}
	if err := ctxtime.Sleep(ctx, window); err != nil {
		return LoadResult{}, err
	}
	rates := make([]float64, n)
	for i, rc := range counters {
		after := rc.Requests()
		if before[i] < 0 || after < 0 {
			return LoadResult{}, fmt.Errorf("contender %d: its request count could not be read", i)
		}
		rates[i] = float64(after-before[i]) / window.Seconds()
	}
	cancel()
	var granted error
	for i, got := range waiting {
		if r := <-got; r.err == nil {
			granted = fmt.Errorf("waiter %d was granted the lock while the holder held it", i+1)
			_ = release(ctx, r.h, lease)
		}
	}
	if err := release(ctx, holding, lease); err != nil {
		return LoadResult{}, fmt.Errorf("holder's release: %w", err)
	}
	if granted != nil {
		return LoadResult{}, granted
	}
	return LoadResult{Lease: lease, Window: window, Holder: rates[0], Head: rates[1], Others: rates[2:]}, nil
}
