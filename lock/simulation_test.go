package lock_test

import (
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

var (
	simHistories = flag.Int("sim.histories", defaultHistories(20), "simulated histories per fault class (make soak uses 1000; 2 under -race)")
	simSeed      = flag.Uint64("sim.seed", 0, "replay only this seed (printed by a failing history)")
	simClass     = flag.String("sim.class", "", "run only this fault class")
	simMutants   = flag.Int("sim.mutant-histories", 150, "histories a mutant may survive before the mutation test fails")
	simVerbose   = flag.Bool("sim.verbose", false, "describe a failing history whole: every claim, attempt, fault and grant")
)

// defaultHistories is n, or a tenth of it under the race detector, which runs a history about
// seven times slower: there a few histories per class show the detector every path, and make
// test runs the full count again without it (as make soak does).
func defaultHistories(n int) int {
	if raceDetector {
		return max(1, n/10)
	}
	return n
}

const simLease = 3 * time.Second

// simDrift is the largest clock-rate error of the drift classes: with it, (lease − margin) on the
// slowest clock still ends before a lease on the fastest one, so the default margin (a tenth of
// the lease) covers it, and a lock without the margin does not.
const simDrift = 0.04

func simClasses() []faultClass {
	base := func(name string) faultClass {
		return faultClass{
			name: name, clients: 5, duration: 60 * time.Second, lease: simLease,
			faults:    memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 20 * time.Millisecond},
			hints:     hintFaults{lose: 0.05, duplicate: 0.05, maxDelay: 5 * time.Millisecond},
			checkFIFO: true,
		}
	}
	var classes []faultClass
	add := func(c faultClass, mod func(*faultClass)) {
		mod(&c)
		classes = append(classes, c)
	}
	add(base("baseline"), func(c *faultClass) { c.try = true })
	add(base("holder-paused"), func(c *faultClass) {
		c.appPause, c.drift = true, simDrift
		c.faults.Stall, c.faults.StallFor = 0.02, 2*simLease
	})
	add(base("unknown-outcome"), func(c *faultClass) {
		c.faults.ApplyLater, c.faults.LaterBy = 0.1, simLease
		c.faults.DropResponse = 0.05
		c.cutAfterRenewal = 0.02
	})
	add(base("duplicate-cas"), func(c *faultClass) {
		c.faults.Duplicate, c.faults.LaterBy = 0.2, 200*time.Millisecond
	})
	add(base("expiry-mid-acquire"), func(c *faultClass) {
		// Store answers take up to 0.8 s and stall for a lease: longer than the dead-waiter rule's
		// margin (two waiter polls), so live waiters are judged dead and skipped by design. Queue
		// order is not checked here.
		c.checkFIFO = false
		c.faults.MaxLatency = 400 * time.Millisecond
		c.faults.Stall, c.faults.StallFor = 0.05, simLease
		c.contenderLease = 2 * simLease
	})
	add(base("partition"), func(c *faultClass) { c.partitions = true })
	add(base("holder-cut-drift"), func(c *faultClass) {
		c.drift, c.cutAfterRenewal, c.partitions, c.appPause = simDrift, 0.1, true, true
	})
	add(base("stale-delayed-reads"), func(c *faultClass) {
		c.drift, c.cutAfterRenewal = simDrift, 0.1
		c.faults.StaleRead, c.faults.StaleBy = 0.2, simLease
		c.faults.DelayRequest, c.faults.DelayBy = 0.1, simLease
	})
	add(base("dropped-requests"), func(c *faultClass) { c.faults.DropRequest = 0.1 })
	add(base("clock-skew"), func(c *faultClass) { c.drift, c.wallJumps = simDrift, true })
	add(base("holder-crash"), func(c *faultClass) { c.crashes, c.zeroWait = true, true })
	add(base("shared-identity"), func(c *faultClass) { c.sharedIdentity, c.zeroWait, c.try = true, true, true })
	add(base("revocation"), func(c *faultClass) { c.revoke = true })
	add(base("hint-faults"), func(c *faultClass) {
		c.hints = hintFaults{lose: 0.3, duplicate: 0.3, maxDelay: simLease, forgeEvery: 20 * time.Millisecond}
		c.crashes, c.zeroWait, c.drift = true, true, simDrift
	})
	add(base("contention-64"), func(c *faultClass) { c.clients, c.duration = 64, 30*time.Second })
	// Queue order under a hand-off race: Try-mode pollers beside blocking waiters, and lightweight
	// transactions slower than plain reads and writes, as in Cassandra under contention.
	add(base("fifo-try-pollers"), func(c *faultClass) {
		c.clients, c.tryPollers, c.maxHold, c.idle, c.livenessBound = 4, 2, simLease/2, simLease, 2*simLease
		c.faults.LWTLatency = 30 * time.Millisecond
	})
	// Queue writes reconciled by the writers' clocks, 30 s apart either way, and waiters cut off
	// long enough to be judged dead by those behind them.
	add(base("queue-skew"), func(c *faultClass) {
		c.clients, c.wallSkew, c.waiterCuts, c.maxHold, c.idle, c.livenessBound = 3, 30*time.Second, true, simLease, 4*simLease, 2*simLease
		c.queueTTL = 6 * time.Second // judged dead after 3 s unrewritten, well before the TTL
	})
	// The owner record deleted (and created again by processes whose clocks are an hour apart, so
	// with lower tokens), or restored to an earlier state, behind the lock's back.
	add(base("record-restore"), func(c *faultClass) {
		c.restore, c.wallSkew, c.try = true, time.Hour, true
	})
	// Forged "free" hints that name record versions, many times the hint budget.
	add(base("forged-hints"), func(c *faultClass) {
		c.hints = hintFaults{lose: 0.05, duplicate: 0.05, maxDelay: 5 * time.Millisecond, forgeEvery: 30 * time.Millisecond, forgeVersions: true}
		c.checkHintCost, c.livenessBound, c.maxHold = true, 2*simLease, simLease/2
	})
	// Two processes with one identity, both with zero-wait restart, each with its own pod's secret:
	// one copied the other's identity. Processes crash and restart in their own pods.
	add(base("copied-identity"), func(c *faultClass) { c.copiedIdentity, c.zeroWait, c.crashes, c.try = true, true, true, true })
	add(base("all-faults"), func(c *faultClass) {
		c.try, c.appPause, c.partitions, c.crashes, c.zeroWait, c.revoke, c.wallJumps = true, true, true, true, true, true, true
		c.hints = hintFaults{lose: 0.2, duplicate: 0.2, maxDelay: simLease / 2, forgeEvery: 100 * time.Millisecond}
		c.drift, c.cutAfterRenewal = simDrift, 0.03
		c.faults = memstore.Faults{
			MinLatency: time.Millisecond, MaxLatency: 50 * time.Millisecond,
			DropRequest: 0.03, DropResponse: 0.03, ApplyLater: 0.05, LaterBy: simLease,
			Duplicate: 0.05, Stall: 0.01, StallFor: 2 * simLease,
			DelayRequest: 0.03, DelayBy: simLease / 6, StaleRead: 0.1, StaleBy: simLease,
		}
	})
	return classes
}

func classByName(t *testing.T, name string) faultClass {
	t.Helper()
	for _, c := range simClasses() {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no fault class %q", name)
	return faultClass{}
}

func classSeed(name string, i int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() + uint64(i)
}

// TestSimulation runs seeded histories per fault class that applies to the library and
// checks each with porcupine, the overlap check and the fenced register.
func TestSimulation(t *testing.T) {
	for _, c := range simClasses() {
		if *simClass != "" && c.name != *simClass {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			n := *simHistories
			if c.clients > 16 && n < 1000 {
				n = max(1, n/5) // heavy class: a fifth in make test, all of them in make soak
			}
			var grants, writes, rejected, faults int
			excused := map[string]int{}
			for i := range n {
				seed := classSeed(c.name, i)
				if *simSeed != 0 {
					if i > 0 {
						break
					}
					seed = *simSeed
				}
				h := simulate(t, c, seed)
				if problems := check(h); len(problems) > 0 {
					t.Fatalf("class %s seed %d: %v\nreplay: go test ./lock -run 'TestSimulation/%s$' -sim.seed=%d\n%s",
						c.name, seed, problems, c.name, seed, describe(h))
				}
				if h.grants == 0 {
					t.Fatalf("class %s seed %d: no grant in %v: the lock made no progress", c.name, seed, c.duration)
				}
				grants += h.grants
				writes += h.writes
				rejected += h.rejected
				faults += h.faults
				if c.checkFIFO {
					for why, k := range fifo(h).excused {
						excused[why] += k
					}
				}
			}
			fmt.Printf("simulation %-19s %4d histories checked: %6d grants, %6d faults injected, %7d fenced writes accepted, %5d stale writes rejected%s\n",
				c.name, n, grants, faults, writes, rejected, orderSummary(c, excused))
		})
	}
}

// orderSummary says which checkers beyond safety ran on a class, and how many overtakes the FIFO
// checker excused under each documented exception.
func orderSummary(c faultClass, excused map[string]int) string {
	var parts []string
	if c.checkFIFO {
		f := "FIFO"
		if len(excused) > 0 {
			var ex []string
			for _, why := range slices.Sorted(maps.Keys(excused)) {
				ex = append(ex, fmt.Sprintf("%d %s", excused[why], why))
			}
			f += " (excused: " + strings.Join(ex, ", ") + ")"
		}
		parts = append(parts, f)
	}
	if c.livenessBound > 0 {
		parts = append(parts, fmt.Sprintf("liveness %v", c.livenessBound))
	}
	if c.checkHintCost {
		parts = append(parts, "hint cost")
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// mutantClass names the fault class that must expose each unsafe variant of the lock.
var mutantClass = map[string]string{
	"no-safety-margin":        "holder-cut-drift",
	"fence-from-receive":      "holder-paused",
	"observe-from-send":       "stale-delayed-reads",
	"unknown-renewal-applied": "unknown-outcome",
	"zero-wait-any-identity":  "shared-identity",
	"revoked-is-free":         "revocation",
	"own-lease-only":          "expiry-mid-acquire",
	"peer-timestamp-expiry":   "clock-skew",
	"token-not-bumped":        "baseline",
	"stale-observation":       "record-restore",
	"remove-at-own-clock":     "queue-skew",
	"dequeue-before-grant":    "fifo-try-pollers",
	"cas-on-hint":             "forged-hints",
	"zero-wait-without-proof": "copied-identity",
}

// TestSimulationCatchesMutants is the mutation test: each deliberately unsafe variant of the lock
// (selected through a test-only seam) runs in the fault class that should expose it, and the
// checker must report a violation within a bounded number of histories. A checker that cannot
// fail is not a check.
func TestSimulationCatchesMutants(t *testing.T) {
	for _, m := range lock.Mutations() {
		t.Run(m, func(t *testing.T) {
			name, ok := mutantClass[m]
			if !ok {
				t.Fatalf("mutation %q has no fault class that should catch it", m)
			}
			c := classByName(t, name)
			c.mutation = m
			for i := range *simMutants {
				seed := classSeed("mutant-"+m, i)
				if problems := check(simulate(t, c, seed)); len(problems) > 0 {
					fmt.Printf("simulation mutant %-24s caught in class %-19s after %2d histories: %s\n", m, name, i+1, clip(problems[0], 110))
					return
				}
			}
			t.Fatalf("the unsafe variant %q survived %d histories of class %s: the simulation cannot see it", m, *simMutants, name)
		})
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimSpace(s[:n]) + "…"
}

// TestSimulationCatchesUnsafeClock makes sure the checks can fail for a broken environment too: a
// client whose clock runs 60% fast (far beyond the safety margin) takes over leases early.
func TestSimulationCatchesUnsafeClock(t *testing.T) {
	c := classByName(t, "holder-paused")
	c.name, c.unsafeFastClock = "unsafe-clock", true
	for i := range 20 {
		if problems := check(simulate(t, c, classSeed(c.name, i))); len(problems) > 0 {
			t.Logf("seed %d caught as expected: %v", classSeed(c.name, i), problems[0])
			return
		}
	}
	t.Fatal("20 histories with a clock running 60% fast passed every check: the checker cannot see overlapping grants")
}

// TestSimulationReplays makes sure a seed replays: the same seed gives the same history, so the
// seed printed by a failing history reproduces it.
func TestSimulationReplays(t *testing.T) {
	c := classByName(t, "all-faults")
	seed := classSeed(c.name, 7)
	a, b := simulate(t, c, seed), simulate(t, c, seed)
	if describe(a) != describe(b) || len(a.claims) != len(b.claims) || a.faults != b.faults || len(a.events) != len(b.events) {
		t.Fatalf("seed %d gave two different histories:\n%s\nversus\n%s", seed, describe(a), describe(b))
	}
	if len(a.claims) == 0 {
		t.Fatal("empty history")
	}
}
