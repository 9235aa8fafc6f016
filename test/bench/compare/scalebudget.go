package compare

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// The budgets of issue 26, item 4, at the default lease with hints working, which the scale report
// checks (a report, not a timed test).
const (
	BudgetLockLoad        = 1.5  // store requests/s of a 3-pod lock, every request Cassandra serves it
	BudgetHolderLoad      = 0.3  // store requests/s of a holder
	BudgetHeadLoad        = 1.0  // of the head of the queue
	BudgetWaiterLoad      = 0.2  // of each other waiter
	BudgetFailover        = 1.05 // crash failover p99, in leases
	BudgetOperatorCores   = 0.5
	BudgetOperatorMemory  = 256 << 20 // bytes of resident memory
	BudgetOperatorReads   = 0.02      // store reads per lock per second at rest
	BudgetLinear          = 20.0      // per-lock figures within this many per cent from 10 to 1,000 locks
	BudgetOperatorAtLocks = 1000      // the number of locks the operator's budgets are for
)

// BudgetHandOffP50 and BudgetHandOffP99 bound hand-offs between sidecar processes.
const (
	BudgetHandOffP50 = 15 * time.Millisecond
	BudgetHandOffP99 = 50 * time.Millisecond
)

// budgetRow is one line of the budget table.
type budgetRow struct {
	what, measured, budget string
	met                    bool
	why                    string // for a miss: what the run measured that explains it
}

// writeBudgets writes the budget table for the systems whose contenders count their requests
// (baton's) and whose runs had an operator.
func writeBudgets(b *strings.Builder, results []ScaleResult) {
	var rows []budgetRow
	var base *ScaleResult
	var largestOp *ScaleResult
	for i := range results {
		r := &results[i]
		if r.Holder.Mean < 0 {
			continue // not a system that counts its contenders' requests: the anchor
		}
		n := fmt.Sprintf("%d locks: ", r.Locks)
		load := func(what string, v RoleLoad, budget float64) budgetRow {
			row := budgetRow{what: n + what, measured: fmt.Sprintf("%.2f (highest %.2f)", v.Mean, v.Max),
				budget: fmt.Sprintf("≤ %.2f", budget), met: v.Mean <= budget}
			if !row.met {
				row.why = strain(*r)
			}
			return row
		}
		lock := budgetRow{what: n + "store requests/s per lock, every request Cassandra serves", measured: fmt.Sprintf("%.2f", r.ServerPerLock),
			budget: fmt.Sprintf("≤ %.2f", BudgetLockLoad), met: r.ServerPerLock >= 0 && r.ServerPerLock <= BudgetLockLoad}
		if !lock.met {
			lock.why = fmt.Sprintf("the contenders' own requests are %.2f per lock; %.2f per lock are requests no contender counts (driver heartbeats and metadata reads of the lock clients' sessions, the measuring reads, the operator's reads)",
				r.Client, r.ServerPerLock-r.Client)
		}
		rows = append(rows, lock,
			load("holder, store requests/s", r.Holder, BudgetHolderLoad),
			load("head of the queue, store requests/s", r.Head, BudgetHeadLoad),
			load("other waiters, store requests/s", r.Rest, BudgetWaiterLoad))
		if len(r.HandOff) > 0 {
			p50, p99 := Percentile(r.HandOff, 50), Percentile(r.HandOff, 99)
			row := budgetRow{what: n + fmt.Sprintf("hand-off p50 / p99 (%d samples; in-process lock clients, not sidecar processes)", len(r.HandOff)),
				measured: ms(p50) + " / " + ms(p99), budget: "≤ " + ms(BudgetHandOffP50) + " / ≤ " + ms(BudgetHandOffP99),
				met: p50 <= BudgetHandOffP50 && p99 <= BudgetHandOffP99}
			if !row.met {
				row.why = strain(*r)
			}
			rows = append(rows, row)
		}
		if len(r.Failover) > 0 {
			p99 := Percentile(r.Failover, 99).Seconds() / r.Lease.Seconds()
			row := budgetRow{what: n + fmt.Sprintf("crash failover p99 (%d samples)", len(r.Failover)), measured: fmt.Sprintf("%.3f × lease", p99),
				budget: fmt.Sprintf("≤ %.2f × lease", BudgetFailover), met: p99 <= BudgetFailover}
			if !row.met {
				row.why = strain(*r)
			}
			rows = append(rows, row)
		}
		if base == nil {
			base = r
		} else if r.System == base.System && base.ServerPerLock > 0 {
			d := (r.ServerPerLock - base.ServerPerLock) / base.ServerPerLock * 100
			row := budgetRow{what: n + fmt.Sprintf("store requests per lock against %d locks", base.Locks),
				measured: fmt.Sprintf("%.2f against %.2f (%+.0f %%)", r.ServerPerLock, base.ServerPerLock, d),
				budget:   fmt.Sprintf("within ±%.0f %%", BudgetLinear), met: d >= -BudgetLinear && d <= BudgetLinear}
			if !row.met {
				row.why = fmt.Sprintf("the contenders' own count per lock moved from %.2f to %.2f; the requests no contender counts from %.2f to %.2f per lock",
					base.Client, r.Client, base.ServerPerLock-base.Client, r.ServerPerLock-r.Client)
			}
			rows = append(rows, row)
		}
		if r.Operator != nil && (largestOp == nil || r.Locks > largestOp.Locks) {
			largestOp = r
		}
	}
	rows = append(rows, budgetRow{what: "every hint dropped: hand-off", measured: "not measured by this run", budget: "≤ 1.5 s", met: false,
		why: "the scale run keeps hints working; a dropped hint is caught by the lock client's poll (lock package tests)"})
	if largestOp != nil {
		o, n := largestOp.Operator, fmt.Sprintf("operator at %d locks, at rest: ", largestOp.Locks)
		if largestOp.Locks != BudgetOperatorAtLocks {
			n = fmt.Sprintf("operator at %d locks (the budget is for %d), at rest: ", largestOp.Locks, BudgetOperatorAtLocks)
		}
		rows = append(rows,
			budgetRow{what: n + "DistributedLock status writes/s", measured: fmt.Sprintf("%.3f", o.StatusWrites), budget: "0", met: o.StatusWrites == 0,
				why: fmt.Sprintf("the operator reconciled locks within the window (%.2f store reads/s) and wrote the status of those whose status had changed since their first reconcile: the holders and queues formed after it, and the contenders are not pods, so no pod change announced them", o.StoreReads)},
			budgetRow{what: n + "store reads per lock per second", measured: fmt.Sprintf("%.4f", o.ReadsPerLock), budget: fmt.Sprintf("≤ %.2f", BudgetOperatorReads),
				met: o.ReadsPerLock <= BudgetOperatorReads, why: fmt.Sprintf("%.1f store reads/s in the window", o.StoreReads)},
			budgetRow{what: n + "CPU", measured: fmt.Sprintf("%.3f cores", o.Cores), budget: fmt.Sprintf("≤ %.1f core", BudgetOperatorCores),
				met: o.Cores <= BudgetOperatorCores, why: fmt.Sprintf("%.1f API writes/s, %.1f store reads/s", o.APIWrites, o.StoreReads)},
			budgetRow{what: n + "resident memory", measured: mib(o.RSS), budget: "≤ " + mib(BudgetOperatorMemory),
				met: o.RSS <= BudgetOperatorMemory, why: "Go heap in use " + mib(o.Heap)},
		)
	}
	b.WriteString("\n## Budgets (issue 26)\n\n")
	b.WriteString("At the default lease, with hints working. Role loads are the mean per contender as the contenders count them (the highest in brackets); the budget applies to the mean. A budget this run does not measure says so.\n\n")
	b.WriteString("| budget | measured | target | met | why missed (measured) |\n|---|---:|---:|:---:|---|\n")
	for _, r := range rows {
		met, why := mark(r.met), r.why
		if r.measured == "not measured by this run" {
			met = "–"
		} else if r.met {
			why = ""
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", r.what, r.measured, r.budget, met, why)
	}
}

// strain describes what the server and the lock clients went through in run r: the server's
// CPU against the machine's cores, and holders that lost their lock.
func strain(r ScaleResult) string {
	s := fmt.Sprintf("measured beside it: Cassandra used %.2f cores of this machine's %d during the window (%.2f at rest)", r.ServerCores, runtime.NumCPU(), r.IdleCores)
	if r.Lost > 0 {
		s += fmt.Sprintf("; %d holders lost their lock on their own (a renewal late)", r.Lost)
	}
	return s
}

// writeOperator writes the table of the operator's costs and the connections per Cassandra node.
func writeOperator(b *strings.Builder, results []ScaleResult) {
	var ops, conns []ScaleResult
	for _, r := range results {
		if r.Operator != nil {
			ops = append(ops, r)
		}
		if len(r.Connections) > 0 {
			conns = append(conns, r)
		}
	}
	if len(ops) > 0 {
		b.WriteString("\n## The operator\n\n")
		b.WriteString("cmd/operator as a process of its own at its defaults (leader election on, the 5 min safety refresh, 8 reconciles at once), beside baton's runs only, reconciling one DistributedLock per lock, created and reconciled before the contenders start. Its CPU (user and system) and its Go heap are over and at the end of the same window as the table above; resident memory is the process's VmRSS. API writes are every POST, PUT, PATCH and DELETE it sent (its own metrics, `rest_client_requests_total`: its leader-election Lease renewal included); status writes are the DistributedLock status writes the API server served (`apiserver_request_total`); store reads its own count (`baton_distributedlock_store_requests_total`). The contenders are lock clients, not pods: no pod changes, so this is the operator at rest.\n\n")
		b.WriteString("| locks | cores | resident memory | Go heap in use | API writes/s | status writes/s | store reads/s | store reads per lock per s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range ops {
			o := r.Operator
			fmt.Fprintf(b, "| %d | %.3f | %s | %s | %.2f | %.2f | %.3f | %.4f |\n", r.Locks, o.Cores, mib(o.RSS), mib(o.Heap), o.APIWrites, o.StatusWrites, o.StoreReads, o.ReadsPerLock)
		}
	}
	if len(conns) > 0 {
		b.WriteString("\n## Connections per Cassandra node\n\n")
		b.WriteString("Client connections in each node's `system_views.clients` at the end of the window: the lock clients' sessions (a control connection and a connection per node each), the operator's, and the benchmark's own measuring sessions (one per node).\n\n")
		b.WriteString("| system | locks |" + nodeHeads(len(conns[0].Connections)) + " total |\n|---|---:|" + strings.Repeat("---:|", len(conns[0].Connections)+1) + "\n")
		for _, r := range conns {
			sum, cells := 0, ""
			for _, c := range r.Connections {
				sum += c
				cells += fmt.Sprintf(" %d |", c)
			}
			fmt.Fprintf(b, "| %s | %d |%s %d |\n", r.System, r.Locks, cells, sum)
		}
	}
}

func nodeHeads(n int) string {
	var s string
	for i := range n {
		s += fmt.Sprintf(" node %d |", i+1)
	}
	return s
}

// mib formats bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// writeOperatorProjection projects the operator's cost to ProjectedLocks locks: a straight line
// through its smallest and largest runs (its cost at rest has a fixed part).
func writeOperatorProjection(b *strings.Builder, results []ScaleResult) {
	var lo, hi *ScaleResult
	for i := range results {
		r := &results[i]
		if r.Operator == nil {
			continue
		}
		if lo == nil || r.Locks < lo.Locks {
			lo = r
		}
		if hi == nil || r.Locks > hi.Locks {
			hi = r
		}
	}
	if lo == nil || hi == nil || hi.Locks == lo.Locks {
		return
	}
	line := func(a, z float64) float64 {
		return z + (z-a)/float64(hi.Locks-lo.Locks)*float64(ProjectedLocks-hi.Locks)
	}
	fmt.Fprintf(b, "- the operator: %.2f cores, %s resident, %.1f store reads/s (a straight line through its runs at %d and %d locks)\n",
		max(0, line(lo.Operator.Cores, hi.Operator.Cores)), mib(int64(line(float64(lo.Operator.RSS), float64(hi.Operator.RSS)))),
		hi.Operator.ReadsPerLock*ProjectedLocks, lo.Locks, hi.Locks)
}
