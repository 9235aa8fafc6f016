package compare

import (
	"fmt"
	"strings"
	"time"
)

// ProjectedLocks is the number of locks the scale report projects its per-lock costs to (its
// heading spells it out).
const ProjectedLocks = 10000

// ScaleReport renders scale results (in run order) as Markdown: one table row per system and
// number of locks, how far each system's per-lock cost moves from its smallest run, and a linear
// projection of the largest run's per-lock costs to ProjectedLocks locks.
func ScaleReport(results []ScaleResult, at time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Many locks at rest\n\n")
	fmt.Fprintf(&b, "Measured by `make bench-scale` on %s. Each system runs N locks of %s at the default lease, one system after the other: ",
		at.UTC().Format("2006-01-02"), contendersOf(results))
	b.WriteString("a holder, the head of the queue and other waiters per lock. Loads are requests per second: " +
		"per contender as the contenders count their store requests (mean, and the highest in brackets), " +
		"and per lock as the server counts every request it serves (Cassandra's `system_views.clients` on every node, " +
		"driver heartbeats included; the API server's `apiserver_request_total`). " +
		"Server CPU is the Cassandra nodes' or the API server's own processes (user and system time), " +
		"with what they use at rest, before any lock client runs, in brackets; CPU per request leaves the rest out.\n\n")
	b.WriteString("| system | locks | holder | head | other waiters | per lock, contenders | per lock, server | server req/s | server cores (at rest) | CPU s per 1,000 requests | hand-off p50 / p99 | failover p50 / p99 | holders lost |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			r.System, r.Locks, role(r.Holder), role(r.Head), role(r.Rest), rate(r.Client), rate(r.ServerPerLock),
			rate(r.Server), fmt.Sprintf("%s (%s)", rate(r.ServerCores), rate(r.IdleCores)), rate(r.CPUPerThousand),
			samples(r.HandOff, 0), samples(r.Failover, r.Lease), r.Lost)
	}
	b.WriteString("\nHand-offs from the holder's release to a waiter's grant; failovers, in multiples of the lease, from the holder's death (its store or API connection cut off) to a waiter's grant. Holders lost: holders that lost their lock on their own during the run (a renewal did not reach the server in time: it could not keep up); their locks are left out of the hand-off and failover samples.\n")
	writeOperator(&b, results)

	b.WriteString("\n## Linear in the number of locks?\n\n")
	b.WriteString("Server requests per lock at each N against the system's smallest run (the target: within 20 %).\n\n")
	first := map[string]ScaleResult{}
	last := map[string]ScaleResult{}
	var order []string
	for _, r := range results {
		if _, ok := first[r.System]; !ok {
			first[r.System] = r
			order = append(order, r.System)
		}
		last[r.System] = r
		base := first[r.System]
		if r.Locks == base.Locks || base.ServerPerLock <= 0 || r.ServerPerLock < 0 {
			continue
		}
		d := (r.ServerPerLock - base.ServerPerLock) / base.ServerPerLock * 100
		fmt.Fprintf(&b, "- %s, %d locks: %.2f per lock against %.2f at %d locks (%+.0f %%) %s\n",
			r.System, r.Locks, r.ServerPerLock, base.ServerPerLock, base.Locks, d, mark(d <= 20 && d >= -20))
	}

	writeBudgets(&b, results)

	b.WriteString("\n## Projected to 10,000 locks\n\n")
	b.WriteString("The largest run's per-lock server requests and CPU per request above rest, times the number of locks, plus the server at rest: a linear projection, not a measurement.\n\n")
	for _, name := range order {
		r := last[name]
		if r.ServerPerLock < 0 {
			continue
		}
		req := r.ServerPerLock * ProjectedLocks
		line := fmt.Sprintf("- %s: %.0f requests/s", name, req)
		if r.CPUPerThousand >= 0 {
			line += fmt.Sprintf(", %.1f cores of its server at %.2f CPU s per 1,000 requests", req/1000*r.CPUPerThousand+r.IdleCores, r.CPUPerThousand)
			if n := len(r.Connections); n > 0 {
				line += fmt.Sprintf(" (%.1f cores on each of %d nodes)", (req/1000*r.CPUPerThousand+r.IdleCores)/float64(n), n)
			}
			if perCore := r.ServerPerLock * r.CPUPerThousand / 1000; perCore > 0 {
				line += fmt.Sprintf("; a core of its server, above rest, carries %.0f such locks", 1/perCore)
			}
		}
		b.WriteString(line + fmt.Sprintf(" (from %d locks)\n", r.Locks))
	}
	writeOperatorProjection(&b, results)
	return b.String()
}

func contendersOf(results []ScaleResult) string {
	if len(results) == 0 {
		return "contenders"
	}
	return fmt.Sprintf("%d contenders", results[0].Contenders)
}

func role(l RoleLoad) string {
	if l.Mean < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f (%.2f)", l.Mean, l.Max)
}

func rate(v float64) string {
	if v < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// samples formats p50 / p99 of s in milliseconds, or in multiples of lease when lease > 0.
func samples(s []time.Duration, lease time.Duration) string {
	if len(s) == 0 {
		return "–"
	}
	p50, p99 := Percentile(s, 50), Percentile(s, 99)
	if lease > 0 {
		return fmt.Sprintf("%.3f / %.3f × lease", p50.Seconds()/lease.Seconds(), p99.Seconds()/lease.Seconds())
	}
	return ms(p50) + " / " + ms(p99)
}
