package compare_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/test/bench/compare"
)

// smokeLease is long enough for renewals to stay on time on a loaded two-core machine under -race.
const smokeLease = 3 * time.Second

// TestSystems exercises every system briefly against the real Cassandra node and API server: three
// contenders never hold at once, a graceful release hands over, a killed holder is taken over after
// about a lease (not at once: it did not release), and the throughput loop sees no overlap.
func TestSystems(t *testing.T) {
	e := setup(t, 2)
	for i, sys := range systems(t, e, smokeLease, logr.Discard()) {
		name := strings.Fields(sys.Name())[0] + fmt.Sprint(i)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Logf("system %q", sys.Name())
			ctx := ctxFor(t, 2*time.Minute)
			exclusion(t, ctx, sys)

			samples, err := compare.Handoff(ctx, sys, uniqueID("smoke-h"), 1, 2, 100*time.Millisecond)
			if err != nil {
				t.Fatalf("handoff: %v", err)
			}
			for _, s := range samples {
				if s > 2*smokeLease {
					t.Errorf("handoff took %v, longer than two leases", s)
				}
			}
			t.Logf("handoffs %v", samples)

			if skip, ok := sys.(compare.FailoverSkipper); !ok || skip.SkipFailover() == "" {
				res, err := compare.Failover(ctx, sys, uniqueID("smoke-k"), 1, 1, smokeLease)
				if err != nil {
					t.Fatalf("failover: %v", err)
				}
				if len(res.Samples)+res.Early != 1 {
					t.Fatalf("failover: %d samples and %d early grants, want one in all", len(res.Samples), res.Early)
				}
				for _, s := range res.Samples {
					if s < smokeLease/4 || s > 2*smokeLease+1500*time.Millisecond {
						t.Errorf("takeover %v after the kill, want about one lease (%v)", s, smokeLease)
					}
				}
				t.Logf("failover %v (early grants %d)", res.Samples, res.Early)
			}

			cell, err := compare.Throughput(ctx, sys, uniqueID("smoke-t"), 3, smokeLease, 200*time.Millisecond, time.Second)
			if err != nil {
				t.Fatalf("throughput: %v", err)
			}
			if cell.Overlaps != 0 || cell.Errors != 0 || cell.Cycles() == 0 {
				t.Errorf("throughput cell: %d cycles, %d overlaps, %d errors", cell.Cycles(), cell.Overlaps, cell.Errors)
			}
			t.Logf("throughput with 3 contenders: %.1f cycles/s, per contender %v", cell.PerSecond(), cell.PerContender)

			switch sys.(type) {
			case *compare.Baton, *compare.Sidecars: // their contenders count store requests
				load, err := compare.Load(ctx, sys, uniqueID("smoke-l"), 3, smokeLease, 500*time.Millisecond, 2*time.Second)
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				// The holder renews (every lease/3); the head polls the record, others only the queue.
				if load.Holder <= 0 || load.Head < load.MaxOthers() {
					t.Errorf("load by role: holder %.2f/s, head %.2f/s, others %v", load.Holder, load.Head, load.Others)
				}
				t.Logf("load: holder %.2f/s, head %.2f/s, others %v", load.Holder, load.Head, load.Others)
			}
		})
	}
}

// exclusion runs three contenders that each take the lock three times and hold it 20 ms; no two
// may hold it at once.
func exclusion(t *testing.T, ctx context.Context, sys compare.System) {
	t.Helper()
	id := uniqueID("smoke-x")
	var (
		busy  atomic.Bool
		wg    sync.WaitGroup
		holds atomic.Int32
	)
	for i := range 3 {
		c, err := sys.Contender(ctx, id, i)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for range 3 {
				h, err := c.Acquire(ctx)
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
					return
				}
				if !busy.CompareAndSwap(false, true) {
					t.Errorf("contender %d acquired while another held the lock", i)
				}
				holds.Add(1)
				time.Sleep(20 * time.Millisecond)
				busy.Store(false)
				if err := h.Release(ctx); err != nil {
					t.Errorf("contender %d release: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if got := holds.Load(); got != 9 {
		t.Errorf("%d holds, want 9", got)
	}
}
