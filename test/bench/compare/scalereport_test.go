package compare

import (
	"strings"
	"testing"
	"time"
)

// TestScaleReportBudgets renders made-up results (no store, no server): every budget of issue 26
// is a row, a met one is marked so, a missed one says the measured reason, and the operator's
// table, the connections and the projections appear.
func TestScaleReportBudgets(t *testing.T) {
	lease := 15 * time.Second
	baton := func(locks int, perLock float64, op *OperatorLoad) ScaleResult {
		return ScaleResult{System: "baton", Locks: locks, Contenders: 3, Lease: lease, Window: time.Minute,
			Holder: RoleLoad{0.2, 0.25}, Head: RoleLoad{0.5, 0.6}, Rest: RoleLoad{0.3, 0.4}, Client: 1.0,
			Server: perLock * float64(locks), ServerPerLock: perLock, ServerCores: 0.5, IdleCores: 0.1, CPUPerThousand: 1.2,
			HandOff: []time.Duration{10 * time.Millisecond}, Failover: []time.Duration{15 * time.Second},
			Operator: op, Connections: []int{7, 8, 9}}
	}
	results := []ScaleResult{
		baton(10, 1.4, &OperatorLoad{Cores: 0.01, RSS: 60 << 20, Heap: 20 << 20, APIWrites: 0.5}),
		baton(1000, 2.0, &OperatorLoad{Cores: 0.03, RSS: 100 << 20, Heap: 40 << 20, APIWrites: 0.5, StoreReads: 1, ReadsPerLock: 0.001}),
	}
	report := ScaleReport(results, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	for _, want := range []string{
		"| 10 locks: store requests/s per lock, every request Cassandra serves | 1.40 | ≤ 1.50 | ✓ |  |",
		"| 1000 locks: store requests/s per lock, every request Cassandra serves | 2.00 | ≤ 1.50 | ✗ | the contenders' own requests are 1.00 per lock; 1.00 per lock are requests",
		"| 10 locks: other waiters, store requests/s | 0.30 (highest 0.40) | ≤ 0.20 | ✗ | measured beside it: Cassandra used 0.50 cores",
		"| 1000 locks: store requests per lock against 10 locks | 2.00 against 1.40 (+43 %) | within ±20 % | ✗ |",
		"| every hint dropped: hand-off | not measured by this run | ≤ 1.5 s | – |",
		"| operator at 1000 locks, at rest: store reads per lock per second | 0.0010 | ≤ 0.02 | ✓ |",
		"| operator at 1000 locks, at rest: resident memory | 100 MiB | ≤ 256 MiB | ✓ |",
		"| 1000 | 0.030 | 100 MiB | 40 MiB | 0.50 | 0.00 | 1.000 | 0.0010 |",
		"| baton | 1000 | 7 | 8 | 9 | 24 |",
		"(8.0 cores on each of 3 nodes); a core of its server, above rest, carries 417 such locks (from 1000 locks)",
		"- the operator: 0.21 cores, 464 MiB resident, 10.0 store reads/s",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
}
